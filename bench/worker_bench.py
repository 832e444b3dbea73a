"""GPU worker benchmark: the Celery worker path against the same engine driven directly in-process.

    DATABASE_URL=postgres://chat:chat@127.0.0.1:5432/chat_bench REDIS_URL=redis://127.0.0.1:6379/5 \
    CELERY_BROKER_URL=redis://127.0.0.1:6379/6 .venv/bin/python bench/worker_bench.py \
        --concurrency 1,8,32 --max-tokens 64

The database must be migrated (``manage.py migrate``); the benchmark adds its own users, chats and runs.
``CELERY_BROKER_URL`` must be a Redis database no other worker consumes (it is flushed).

Both paths use one engine built from ``settings.ENGINE`` (``ENGINE_*`` variables; ``max_num_seqs`` at least
the highest concurrency), the same rendered prompts and greedy sampling. Both stay up and their waves alternate
(``--repeats`` each, median shown), so both paths see the same background load on a shared machine:

- direct: an :class:`inference_workers.engine.host.EngineHost` in this process, one thread per request
  (the way Celery's task threads feed it); TTFT = submit to the first delta with text;
- worker: ``celery worker -P threads -c <max_num_seqs>`` as a subprocess; each request is a run row sent
  with ``send_to_worker``; TTFT = send to the first ``delta`` event readable in the run's Redis Stream
  (what an SSE client sees), tokens from the terminal event's usage.

For each concurrency level it prints output tokens/s (all output tokens / wall time of the wave), TTFT
p50 / p99, and the worker/direct ratios. It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")

PROMPTS = [
    "Write a short poem about the sea.",
    "Describe a sunny morning in a small town.",
    "Explain why the sky is blue.",
    "Tell me about elephants.",
    "Give me three tips for learning to cook.",
    "What makes a good friend?",
    "Describe the taste of an apple.",
    "Why do people like music?",
]


@dataclasses.dataclass
class Wave:
    concurrency: int
    wall_s: float
    output_tokens: int
    ttft_s: list[float]

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s else 0.0

    def ttft(self, q: float) -> float:
        ordered = sorted(self.ttft_s)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def prompt_for(i: int) -> str:
    return PROMPTS[i % len(PROMPTS)]


def rendered_prompts(concurrency: int, max_tokens: int) -> list[str]:
    """The prompts exactly as the worker renders them (``build_run_prompt`` on equivalent run rows)."""
    from inference_workers.prompting import build_run_prompt
    from runs.models import Run

    return [build_run_prompt(run=Run.objects.get(pk=pk)) for pk in make_runs(concurrency, max_tokens)]


# direct ----------------------------------------------------------------------------------------------------


def direct_wave(host: object, concurrency: int, max_tokens: int) -> Wave:
    prompts = rendered_prompts(concurrency, max_tokens)
    from generation.sampling import SamplingSpec
    from inference_workers.engine.base import GenerationRequest
    from inference_workers.engine.host import EngineHost

    assert isinstance(host, EngineHost)
    ttfts: list[float] = []
    tokens = [0] * concurrency
    lock = threading.Lock()
    barrier = threading.Barrier(concurrency + 1)

    def one(i: int) -> None:
        request = GenerationRequest(
            request_id=f"bench-{uuid.uuid4().hex[:8]}",
            prompt=prompts[i],
            max_tokens=max_tokens,
            sampling=SamplingSpec(temperature=0.0),
        )
        barrier.wait()
        started = time.monotonic()
        first = None
        for delta in host.stream(request):
            if delta is None:
                continue
            if first is None and delta.text:
                first = time.monotonic() - started
            tokens[i] += delta.new_tokens
        with lock:
            ttfts.append(first if first is not None else float("nan"))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.monotonic()
    for t in threads:
        t.join()
    return Wave(concurrency, time.monotonic() - started, sum(tokens), ttfts)


# through the Celery worker -------------------------------------------------------------------------------


def make_runs(concurrency: int, max_tokens: int) -> list[int]:
    from accounts.models import Tier, User
    from chats.models import Chat, Message, MessageRole
    from runs.models import Run

    tier = Tier.objects.get(name="pro")
    ids = []
    for i in range(concurrency):
        user = User.objects.create(username=f"bench-{uuid.uuid4().hex[:10]}", tier=tier)
        chat = Chat.objects.create(owner=user, title="bench")
        message = Message.objects.create(chat=chat, role=MessageRole.USER, content=prompt_for(i))
        run = Run.objects.create(
            chat=chat,
            user=user,
            tier=tier,
            user_message=message,
            max_tokens=max_tokens,
            temperature=0.0,
            top_p=1.0,
            priority=tier.priority,
        )
        ids.append(run.pk)
    return ids


def worker_wave(concurrency: int, max_tokens: int) -> Wave:
    from core.redis_client import get_redis
    from runs.routing import send_to_worker
    from runs.streaming.contract import stream_key

    run_ids = make_runs(concurrency, max_tokens)
    client = get_redis()
    first: dict[int, float] = {}
    done_at: dict[int, float] = {}
    tokens: dict[int, int] = {}
    last_id = dict.fromkeys(run_ids, "0-0")
    sent_at: dict[int, float] = {}
    for run_id in run_ids:
        sent_at[run_id] = time.monotonic()
        send_to_worker(run_id=run_id, queue="pro")
    started = min(sent_at.values())
    # One reader for every stream, like the SSE relay: XREAD BLOCK over all keys still open.
    while len(done_at) < len(run_ids):
        open_ids = [r for r in run_ids if r not in done_at]
        reply: Any = client.xread({stream_key(r): last_id[r] for r in open_ids}, block=1000)
        now = time.monotonic()
        for key, entries in reply or []:
            run_id = int(str(key).split(":")[1])
            for entry_id, fields in entries:
                last_id[run_id] = entry_id
                if fields["event"] == "delta" and run_id not in first:
                    first[run_id] = now - sent_at[run_id]
                elif fields["event"] == "reset":
                    first.pop(run_id, None)
                elif fields["event"] in ("done", "error"):
                    done_at[run_id] = now
                    data = json.loads(fields["data"])
                    tokens[run_id] = int(data.get("usage", {}).get("output_tokens", 0))
    return Wave(concurrency, max(done_at.values()) - started, sum(tokens.values()), list(first.values()))


def start_worker(slots: int, log_path: Path) -> subprocess.Popen[bytes]:
    from bench.lib.processes import celery_worker_argv, wait_worker_heartbeat

    name = f"bench-{uuid.uuid4().hex[:6]}@bench"
    cmd = celery_worker_argv(name=name, concurrency=slots, events=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHAT_AFFINITY": "false"}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    wait_worker_heartbeat(name, proc, timeout_s=600, what=f"the worker (log: {log_path})")
    return proc


def report(label: str, waves: list[Wave]) -> None:
    print(f"\n{label}")
    print(f"{'conc':>5} {'tokens':>7} {'wall s':>7} {'tok/s':>7} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12}")
    for w in waves:
        print(
            f"{w.concurrency:>5} {w.output_tokens:>7} {w.wall_s:>7.2f} {w.tokens_per_s:>7.1f} "
            f"{w.ttft(0.5) * 1000:>12.0f} {w.ttft(0.99) * 1000:>12.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated concurrent runs per wave")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1, help="waves per path and level (the median is shown)")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]

    import django

    django.setup()
    import redis
    from django.conf import settings

    from accounts.models import Tier
    from accounts.tier_defaults import seed_default_tiers
    from inference_workers.engine.host import EngineHost

    seed_default_tiers(Tier)
    cfg = settings.ENGINE
    if cfg.max_num_seqs < max(levels):
        raise SystemExit(f"ENGINE_MAX_NUM_SEQS={cfg.max_num_seqs} is below the highest concurrency {max(levels)}")
    print(
        f"engine: {cfg.backend} {cfg.model_path} dtype={cfg.dtype} max_num_seqs={cfg.max_num_seqs} "
        f"max_model_len={cfg.max_model_len} eager={cfg.enforce_eager}; max_tokens={args.max_tokens}, greedy"
    )

    # The worker subprocess and the in-process engine both stay up; their waves alternate, so both paths
    # see the same background load on a shared machine. An idle engine costs no CPU.
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    log_path = ROOT / "artifacts" / "worker-bench-worker.log"
    log_path.parent.mkdir(exist_ok=True)
    t = time.monotonic()
    proc = start_worker(cfg.max_num_seqs, log_path)
    print(f"worker up in {time.monotonic() - t:.0f} s")
    host = EngineHost(cfg)
    t = time.monotonic()
    host.start()
    print(f"direct engine up in {time.monotonic() - t:.0f} s")
    direct: list[Wave] = []
    through: list[Wave] = []
    try:
        direct_wave(host, 1, 4)  # warm-up
        worker_wave(1, 4)
        for c in levels:
            runs_d, runs_w = [], []
            for _ in range(args.repeats):
                runs_d.append(direct_wave(host, c, args.max_tokens))
                runs_w.append(worker_wave(c, args.max_tokens))
            direct.append(sorted(runs_d, key=lambda w: w.tokens_per_s)[len(runs_d) // 2])
            through.append(sorted(runs_w, key=lambda w: w.tokens_per_s)[len(runs_w) // 2])
            print(f"  level {c}: done ({args.repeats} alternating waves per path)", flush=True)
    finally:
        host.shutdown()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    report("direct (EngineHost in-process), median wave", direct)
    report("through the Celery worker (send_to_worker -> task thread -> engine -> Redis Stream), median wave", through)

    if direct and through:
        print("\nworker / direct")
        print(f"{'conc':>5} {'tok/s ratio':>12} {'TTFT p50 added ms':>18} {'TTFT p99 added ms':>18}")
        for d, w in zip(direct, through, strict=True):
            print(
                f"{d.concurrency:>5} {w.tokens_per_s / d.tokens_per_s:>12.3f} "
                f"{(w.ttft(0.5) - d.ttft(0.5)) * 1000:>18.0f} {(w.ttft(0.99) - d.ttft(0.99)) * 1000:>18.0f}"
            )
        ratios = [w.tokens_per_s / d.tokens_per_s for d, w in zip(direct, through, strict=True)]
        print(f"(median throughput ratio over the levels: {statistics.median(ratios):.3f})")


if __name__ == "__main__":
    main()
