"""Serving ceiling: how many tokens/s and runs/s our serving path sustains when the engine is as fast as a GPU's,
measured with no GPU.

    .venv/bin/python bench/serving_ceiling.py \\
        --database-url postgres://chat:chat@127.0.0.1:5432/chat_ceiling \\
        --redis-url "$(redis_url 13)" --broker-url "$(redis_url 14)"
    .venv/bin/python bench/serving_ceiling.py --quick ...      # the short form CI runs (tests/bench)

(``redis_url`` comes from ``source scripts/redis-env.sh``; the Redis databases are flushed, never db 0.)

The engine is the stand-in (``ENGINE_BACKEND=simulated``, :mod:`inference_workers.engine.simulated`) set to a
GPU's shape: ``--slots`` running sequences (256), each making ``--rate`` tokens/s (40: a step of 25 ms whatever the
batch, ``SIM_STEP_PER_SEQ_S=0``), prefill free (``SIM_PREFILL_PER_TOKEN_S=0``). It does almost nothing per token
(a hash and a word from a list), so what the processes spend is the serving path's own cost: the ``/v1`` request,
the admission passes, the dispatcher, Celery, the worker's task thread and stream writer, Redis, the relay and the
OpenAI chunks. One web process (uvicorn), the dispatcher and one Celery worker (threads pool, one thread per
slot), as ``make run`` starts them, on a database and Redis databases of the bench's own.

The client is vLLM's own benchmark client (``vllm.benchmarks.serve``, :mod:`bench.lib.serve_client`), backend
``openai-chat``: random prompts of ``--input-len`` tokens, ``--output-len`` tokens with ``ignore_eos``, temperature 0,
one run per level of ``--levels`` concurrent streams (``--prompts-per-stream`` prompts each). For each level it prints
the output tokens/s and runs/s the clients got, TTFT p50/p99, the inter-chunk gap p99 the clients saw (vLLM's ITL:
with 25 ms a token from the engine, a gap over ``--itl-limit-ms`` (100) means the path fell behind), and each
process's CPU: seconds per 1,000 tokens, milliseconds per run and the share of a core it used. The ceiling is the
highest level whose gap p99 stayed within the limit with no failed request; the figures per process and per core
are that level's.

The client runs on the same machine and takes CPU of its own (printed as ``client``): on a small machine the client
and our processes share the cores, so the tokens/s here are a floor of what one process of ours can do, and the CPU
per token (which does not depend on how busy the machine is, to first order) is the figure to plan with. It prints
figures; it asserts nothing about them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib import proc_cpu  # noqa: E402
from bench.lib.serve_client import LevelResult, ServeTarget, run_level  # noqa: E402
from bench.lib.stack import high_limits_user  # noqa: E402
from bench.lib.stand_in_stack import StandInConfig, prepare, start_stack, stop_stack  # noqa: E402

OUR_PROCESSES = ("web", "worker", "dispatcher", "redis-server", "postgres (cluster)")


@dataclass
class Level:
    result: LevelResult
    cpu_s: dict[str, float]
    wall_s: float


def stack_config(args: argparse.Namespace) -> StandInConfig:
    return StandInConfig(
        database_url=args.database_url,
        redis_url=args.redis_url,
        broker_url=args.broker_url,
        slots=args.slots,
        rate=args.rate,
        moderation=args.moderation == "on",
    )


def measure_level(
    target: ServeTarget,
    args: argparse.Namespace,
    streams: int,
    seed: int,
    meters: dict[str, Callable[[], float]],
    log: Path,
    results: Path,
) -> Level:
    marks: dict[str, float] = {}
    before: dict[str, float] = {}
    after: dict[str, float] = {}

    def start() -> None:
        marks["t0"] = time.monotonic()
        before.update(proc_cpu.snapshot(meters))

    def end() -> None:
        after.update(proc_cpu.snapshot(meters))
        marks["t1"] = time.monotonic()

    result = run_level(
        target,
        tokenizer=args.tokenizer,
        concurrency=streams,
        prompts=streams * args.prompts_per_stream,
        seed=seed,
        input_len=args.input_len,
        output_len=args.output_len,
        result_dir=results,
        log=log,
        on_start=start,
        on_end=end,
    )
    return Level(result, proc_cpu.delta(before, after), marks["t1"] - marks["t0"])


def within_limit(level: Level, limit_ms: float) -> bool:
    r = level.result
    return r.failed == 0 and r.completed > 0 and r.itl_p99_ms <= limit_ms


def print_level(level: Level) -> None:
    r = level.result
    runs_per_s = r.completed / r.duration_s if r.duration_s else 0.0
    print(
        f"  {r.concurrency:>4} streams: {r.completed}/{r.prompts} ok, {r.output_tokens} tok in {r.duration_s:.1f} s = "
        f"{r.tok_per_s:,.0f} tok/s, {runs_per_s:.1f} runs/s; TTFT p50 {r.ttft_p50_ms:.0f} p99 {r.ttft_p99_ms:.0f} ms;"
        f" chunk gap (ITL) p99 {r.itl_p99_ms:.0f} ms",
        flush=True,
    )
    if r.failed:
        print(f"    {r.failed} failed, e.g. {r.errors[:1]}", flush=True)


def report(levels: list[Level], args: argparse.Namespace) -> None:
    print(f"\n== per process, per level (CPU s per 1,000 tokens / ms per run / share of one core); limit: chunk gap "
          f"p99 <= {args.itl_limit_ms:.0f} ms, 0 failed")  # fmt: skip
    names = list(levels[0].cpu_s)
    print(f"{'streams':>7} {'tok/s':>7} {'runs/s':>6} {'ok':>3} | " + " | ".join(f"{n:^20}" for n in names))
    for level in levels:
        r = level.result
        tokens = max(r.output_tokens, 1)
        cells = []
        for n in names:
            seconds = level.cpu_s[n]
            cells.append(
                f"{seconds / tokens * 1000:5.2f} {seconds / max(r.completed, 1) * 1000:6.1f} "
                f"{seconds / level.wall_s * 100:4.0f}%"
            )
        ok = "yes" if within_limit(level, args.itl_limit_ms) else "no"
        runs_per_s = r.completed / r.duration_s if r.duration_s else 0.0
        print(f"{r.concurrency:>7} {r.tok_per_s:>7,.0f} {runs_per_s:>6.1f} {ok:>3} | " + " | ".join(cells))
    good = [lv for lv in levels if within_limit(lv, args.itl_limit_ms)]
    if not good:
        print("\nceiling: no level stayed within the limit")
        return
    best = max(good, key=lambda lv: lv.result.tok_per_s)
    r = best.result
    ours = sum(best.cpu_s[n] for n in OUR_PROCESSES)
    print(
        f"\nceiling: {r.tok_per_s:,.0f} tok/s and {r.completed / r.duration_s:.1f} runs/s at {r.concurrency} streams "
        f"(chunk gap p99 {r.itl_p99_ms:.0f} ms); our processes used {ours / best.wall_s:.2f} cores = "
        f"{r.tok_per_s / max(ours / best.wall_s, 1e-9):,.0f} tok/s per core"
    )
    for n in ("web", "worker", "dispatcher"):
        share = best.cpu_s[n] / best.wall_s
        per_k = best.cpu_s[n] / max(r.output_tokens, 1) * 1000
        print(
            f"  {n:<10} {per_k:.3f} CPU s/1k tok, {best.cpu_s[n] / max(r.completed, 1) * 1000:.1f} ms/run, "
            f"{share:.0%} of a core; one such process at a full core: ~{1000 / per_k if per_k else 0:,.0f} tok/s, "
            f"~{r.completed / max(best.cpu_s[n], 1e-9):,.0f} runs/s"
        )


def level_figures(level: Level, args: argparse.Namespace) -> dict[str, object]:
    r = level.result
    return {
        "streams": r.concurrency,
        "prompts": r.prompts,
        "completed": r.completed,
        "failed": r.failed,
        "output_tokens": r.output_tokens,
        "expected_tokens": r.prompts * args.output_len,
        "tok_per_s": r.tok_per_s,
        "itl_p99_ms": r.itl_p99_ms,
        "within_limit": within_limit(level, args.itl_limit_ms),
        "wall_s": level.wall_s,
        "cpu_s": level.cpu_s,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--broker-url", required=True)
    parser.add_argument("--levels", default="32,64,128,256", help="concurrent streams per level")
    parser.add_argument("--prompts-per-stream", type=int, default=2)
    parser.add_argument("--slots", type=int, default=256, help="the stand-in engine's running sequences")
    parser.add_argument("--rate", type=float, default=40.0, help="tokens/s of each running sequence")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--itl-limit-ms", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--quick", action="store_true", help="one small level (CI's short form)")
    parser.add_argument("--json", type=Path, help="also write each level's figures to this file")
    parser.add_argument(
        "--moderation",
        choices=["on", "off"],
        default="on",
        help="the pro tier's moderation passes (on: as shipped, the prompt and the streamed answer; off: neither, "
        "the work of vLLM's own server)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.levels, args.prompts_per_stream, args.output_len, args.slots = "16", 2, 32, 64
    args.levels = [int(x) for x in str(args.levels).split(",")]
    if max(args.levels) > args.slots:
        parser.error(f"--levels go up to {max(args.levels)}, above --slots {args.slots}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = stack_config(args)
    prepare(config)
    from django.conf import settings

    args.tokenizer = settings.ENGINE.model_path
    logs = ROOT / "artifacts"
    results = logs / "ceiling-serve"
    results.mkdir(parents=True, exist_ok=True)
    client_log = logs / "ceiling-client.log"
    client_log.write_text("")
    print(
        f"stand-in engine: {args.slots} sequences at {args.rate:g} tok/s each (ceiling {args.slots * args.rate:,.0f} "
        f"tok/s); random prompts of {args.input_len} tokens, {args.output_len} output tokens (ignore_eos); levels "
        f"{args.levels}, {args.prompts_per_stream} prompts per stream; moderation {args.moderation}; "
        f"{os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    # A SIGTERM (a timeout, a kill) stops the stack too: the processes run in sessions of their own.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stack = start_stack(config, logs)
    levels: list[Level] = []
    try:
        target = ServeTarget(stack.base_url, str(settings.ENGINE.served_model_name), high_limits_user(), "ceiling")
        run_level(target, tokenizer=args.tokenizer, concurrency=2, prompts=2, seed=args.seed - 1, input_len=16,
                  output_len=4, result_dir=results, log=client_log)  # fmt: skip
        for index, streams in enumerate(args.levels):
            level = measure_level(target, args, streams, args.seed + index, stack.meters, client_log, results)
            print_level(level)
            levels.append(level)
    finally:
        stop_stack(stack)
    report(levels, args)
    if args.json:
        args.json.write_text(json.dumps([level_figures(lv, args) for lv in levels], indent=2))
    failed = sum(lv.result.failed for lv in levels)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}; logs under {logs}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
