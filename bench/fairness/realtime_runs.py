"""The real-time figures: ours alone (R1-R4), the schedulers side by side (C1-C4: FCFS, vLLM priority by tier,
ours) and the headroom trade-off curve (C5), on the engine ``ENGINE_*`` configures."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections import defaultdict

from bench.fairness.realtime import SCHEDULERS, RealtimeBench
from bench.fairness.report import TIER_CONFIGURED, TIER_NOTE, Table, print_summary, print_vllm_split
from bench.fairness.stats import (
    jain_per_window,
    light_parts,
    light_ttfts,
    mean_batch,
    pct,
    served_by_tier,
    service_difference,
    service_events,
    tokens_per_s,
    user_tokens_per_s,
)
from bench.fairness.workload import GATE, OPEN_GATE, Trace, Workload
from scheduling.gate import GatePolicy

REALTIME_FIGURES = ("isolation", "jain", "tiers", "throughput", "compare", "ttft", "curve", "arrival")
COMPARED = ("fcfs", "tier", "ours")


async def compare_ttft(
    bench: RealtimeBench,
    seconds: float,
    warm: float,
    seed: int,
    table: Table,
    compared: tuple[str, ...] = COMPARED,
    *,
    gate: GatePolicy,
) -> float:
    """Prints C1 and adds its rows to ``table``; returns ours' light p99 at share (the curve's baseline)."""
    print(
        "\n== C1. Light users' TTFT, heavy user at its share vs flooding at 10x (all free tier): a closed-loop user "
        "(1 prompt at a time, ~1 s think time) and an open-loop one (Poisson 0.3 prompts/s); 100-token prompts, "
        "8-token answers; the heavy user 100/64 =="
    )
    print(
        f"{'scheduler':20} {'heavy':9} {'closed p50/p99 s':>17} {'open p50/p99 s':>15} {'both p99':>8} "
        f"{'queue p99':>9} {'engine p99':>10} {'heavy tok/s':>11} {'tok/s':>6}"
    )
    light = [
        Workload(user=1, tier="free", rate_per_s=0.0, prompt=100, output=8, think_s=1.0),
        Workload(user=3, tier="free", rate_per_s=0.3, prompt=100, output=8),
    ]
    ratio: dict[str, str] = {}
    p99_flood: dict[str, str] = {}
    baseline = float("nan")
    for sched in compared:
        p99s: dict[str, dict[str, float]] = {}
        for load, rate, length in (("at share", 0.55, 1.0), ("10x flood", 5.5, 1.5)):
            res = await bench.run(
                [*light, Workload(2, "free", rate, 100, 64)], length * seconds, gate=gate, seed=seed, mode=sched
            )
            row: dict[str, float] = {}
            cells = []
            for name, users in (("closed", {1}), ("open", {3}), ("both", {1, 3})):
                values, censored = light_ttfts(res, users, warm)
                row[name] = pct(values, 0.99)
                mark = f"(>{censored})" if censored else ""
                cells.append(f"{pct(values, 0.5):.2f}/{row[name]:.2f}{mark}")
            p99s[load] = row
            parts = light_parts(res, {1, 3}, warm)
            print(
                f"{sched:20} {load:9} {cells[0]:>17} {cells[1]:>15} {row['both']:8.2f} "
                f"{pct(parts['queue'], 0.99):9.2f} {pct(parts['engine'], 0.99):10.2f} "
                f"{user_tokens_per_s(res, 2, warm):11.1f} {tokens_per_s(res, warm):6.1f}"
            )
            print_vllm_split(parts)
        r = {k: p99s["10x flood"][k] / p99s["at share"][k] for k in ("closed", "open", "both")}
        if sched == "ours":
            baseline = p99s["at share"]["both"]
        ratio[sched] = f"{r['both']:.2f} (closed {r['closed']:.2f}, open {r['open']:.2f})"
        p99_flood[sched] = f"{p99s['at share']['both']:.2f} -> {p99s['10x flood']['both']:.2f} s"
        print(f"{sched}: p99 ratio flood / at share: {ratio[sched]}   (target <= 1.5, aim 1.2)")
    print("(>n: n prompts still unanswered at the end, counted with their wait so far; queue: arrival to dispatch;")
    print(
        " engine: dispatch to first token; inside vLLM: submit, waiting queue, scheduled to first token, output path)"
    )
    table.append(("light users' TTFT p99, at share -> 10x flood", p99_flood, ""))
    table.append(("light TTFT p99 ratio, flood / at share", ratio, "<= 1.5 (1.2)"))
    return baseline


async def compare_backlogged(
    bench: RealtimeBench,
    seconds: float,
    warm: float,
    seed: int,
    table: Table,
    compared: tuple[str, ...] = COMPARED,
    *,
    gate: GatePolicy,
) -> None:
    sizes = [(32, 16), (64, 32), (128, 48), (256, 64)]
    print(
        "\n== C2. 4 equally weighted backlogged free-tier users of different sizes (prompt/max output "
        + ", ".join(f"{p}/{o}" for p, o in sizes)
        + ", 3 prompts/s each): Jain's index and VTC's service difference =="
    )
    workloads = [Workload(10 + k, "free", 3.0, p, o) for k, (p, o) in enumerate(sizes)]
    users = [w.user for w in workloads]
    length = 1.5 * seconds
    jains: dict[str, str] = {}
    diffs: dict[str, str] = {}
    for sched in compared:
        res = await bench.run(workloads, length, gate=gate, seed=seed, mode=sched)
        service = service_events(res)
        generated = [(t, u, float(n)) for t, u, _, n in res.engine.produced]
        window = 10.0 if length - warm >= 20 else (length - warm) / 2  # short (smoke) runs: two windows
        gen_j = jain_per_window(generated, users, start=warm, end=length, window=window)
        svc_j = jain_per_window(service, users, start=warm, end=length, window=window)
        worst, largest = service_difference(res, users, start=warm, end=length)
        per_user = {u: sum(n for t, uu, n in service if uu == u and t >= warm) for u in users}
        print(
            f"{sched:20} Jain over {window:.0f} s windows, min: output {min(gen_j):.3f}, "
            f"input+output {min(svc_j):.3f}; "
            f"service difference {worst:.0f} tokens = {worst / largest:.2f} x the largest request ({largest}); "
            "served per user " + "/".join(f"{per_user[u]:.0f}" for u in users)
        )
        jains[sched] = f"{min(gen_j):.3f} / {min(svc_j):.3f}"
        diffs[sched] = f"{worst / largest:.2f} x ({worst:.0f} tok)"
    table.append(("Jain, min over 10 s windows: output / input+output", jains, ">= 0.95"))
    table.append(("service difference / largest request cost (VTC)", diffs, "<= 2"))


async def compare_tiers(
    bench: RealtimeBench,
    seconds: float,
    warm: float,
    seed: int,
    table: Table,
    compared: tuple[str, ...] = COMPARED,
    *,
    gate: GatePolicy,
) -> None:
    print("\n== C3. Tier shares of tokens served: one user per tier, each sending 3 prompts/s (100/64) ==")
    workloads = [Workload(20 + k, tier, 3.0, 100, 64) for k, tier in enumerate(("pro", "plus", "free", "batch"))]
    settle = 2 * warm
    shares: dict[str, str] = {}
    for sched in compared:
        res = await bench.run(workloads, 1.5 * seconds, gate=gate, seed=seed, mode=sched)
        served = served_by_tier(res, settle)
        total = sum(served.values()) or 1.0
        shares[sched] = " / ".join(f"{served[t] / total:.3f}" for t in ("pro", "plus", "free", "batch"))
        print(f"{sched:20} pro / plus / free / batch: {shares[sched]}   (configured 0.7 / 0.2 / 0.1 / 0, +-5%)")
    table.append(("tier shares served (pro / plus / free / batch)", shares, "0.7/0.2/0.1/0"))


async def compare_throughput(
    bench: RealtimeBench,
    seconds: float,
    warm: float,
    seed: int,
    table: Table,
    compared: tuple[str, ...] = COMPARED,
    *,
    gate: GatePolicy,
) -> None:
    print("\n== C4. Throughput, saturated: 8 users across 3 tiers, 1 prompt/s each (150/96) ==")
    workloads = [Workload(30 + k, ("pro", "plus", "free")[k % 3], 1.0, 150, 96) for k in range(8)]
    figures: dict[str, float] = {}
    for sched in compared:
        res = await bench.run(workloads, seconds, gate=gate, seed=seed, mode=sched)
        assert isinstance(res.engine, Trace)
        batch, tpot = mean_batch(res, warm)
        figures[sched] = tokens_per_s(res, warm)
        print(
            f"{sched:20} {figures[sched]:6.1f} output tok/s, mean batch {batch:.1f}, tpot {tpot:.3f} s, "
            f"engine waiting peak {res.engine.peak_waiting}"
        )
    table.append(
        (
            "output tok/s, saturated (ours / FCFS)",
            {
                k: f"{v:.1f} ({v / figures['fcfs']:.3f})" if "fcfs" in figures else f"{v:.1f}"
                for k, v in figures.items()
            },
            ">= 0.95 of FCFS",
        )
    )


async def tradeoff_curve(
    bench: RealtimeBench,
    seconds: float,
    warm: float,
    seed: int,
    headrooms: tuple[int, ...],
    *,
    at_share_p99: float | None,
    budget: str,
    gate: GatePolicy,
) -> list[str]:
    """Ours under the 10x flood of C1 with more or fewer headroom slots: the light users' p99 against the flood's
    throughput (the operator's dials: ``SCHED_HEADROOM_SLOTS`` here, ``ENGINE_MAX_NUM_BATCHED_TOKENS`` per run).
    The ratio is against ``at_share_p99`` (C1's, ours), measured first when C1 did not run."""
    print(
        "\n== C5. Trade-off: headroom slots against the light users' p99 and the flood's throughput (ours, C1 flood) =="
    )
    light = [
        Workload(user=1, tier="free", rate_per_s=0.0, prompt=100, output=8, think_s=1.0),
        Workload(user=3, tier="free", rate_per_s=0.3, prompt=100, output=8),
    ]
    if at_share_p99 is None:
        res = await bench.run([*light, Workload(2, "free", 0.55, 100, 64)], seconds, gate=gate, seed=seed)
        at_share_p99 = pct(light_ttfts(res, {1, 3}, warm)[0], 0.99)
        print(f"baseline: heavy at its share, shipped headroom ({gate.headroom_slots}): light p99 {at_share_p99:.2f} s")
    lines = []
    for slots in headrooms:
        slots_gate = dataclasses.replace(gate, headroom_slots=slots)
        res = await bench.run([*light, Workload(2, "free", 5.5, 100, 64)], 1.5 * seconds, gate=slots_gate, seed=seed)
        values, censored = light_ttfts(res, {1, 3}, warm)
        parts = light_parts(res, {1, 3}, warm)
        line = (
            f"step budget {budget}, headroom {slots:2d} slots{' lent' if gate.preempt else ''}: light p50/p99 "
            f"{pct(values, 0.5):.2f}/"
            f"{pct(values, 0.99):.2f} s (ratio {pct(values, 0.99) / at_share_p99:.2f}) "
            f"({len(values)} prompts{f', {censored} unanswered' if censored else ''}), flood "
            f"{user_tokens_per_s(res, 2, warm):.1f} tok/s, all {tokens_per_s(res, warm):.1f} tok/s, "
            f"mean batch {mean_batch(res, warm)[0]:.1f}"
            + (f", {getattr(res.engine, 'preemptions', 0)} preemptions" if gate.preempt else "")
        )
        print(line)
        print_vllm_split(parts)
        lines.append(line)
    return lines


async def arrival_figure(
    bench: RealtimeBench, seconds: float, seed: int, *, gate: GatePolicy, warm: float
) -> tuple[str, str, str]:
    """A flood alone for ``seconds``, then a chatting user arrives (``SCHED_PREEMPT``: the headroom lent to the flood
    and taken back by preemption, or kept empty): the flood's tokens/s alone and after, the newcomer's TTFTs."""
    lent = "lent, taken back by preemption" if gate.preempt else "kept"
    print(f"\n== R8. A flood alone for {seconds:.0f} s, then a chatting user arrives (headroom {lent}) ==")
    flood = Workload(2, "free", 5.5, 100, 64)
    newcomer = Workload(user=1, tier="free", rate_per_s=0.0, prompt=100, output=8, think_s=1.0, start_s=seconds)
    res = await bench.run([flood, newcomer], 2 * seconds, gate=gate, seed=seed)

    def flood_rate(start: float, end: float) -> float:
        return sum(n for t, u, _, n in res.engine.produced if u == 2 and start <= t < end) / (end - start)

    assert isinstance(res.engine, Trace)
    alone_batch = [s.running for t, s in res.engine.samples if warm <= t < seconds]
    values, censored = light_ttfts(res, {1}, seconds)
    firsts = sorted((r.arrival, (r.first_token or res.horizon) - r.arrival) for r in res.requests if r.user == 1)
    line = (
        f"headroom {gate.headroom_slots} slots {lent}: flood alone {flood_rate(warm, seconds):.1f} tok/s "
        f"(mean batch {statistics.fmean(alone_batch) if alone_batch else float('nan'):.1f}), after the arrival "
        f"{flood_rate(seconds + 10, res.horizon):.1f} tok/s; newcomer's first TTFT "
        f"{firsts[0][1] if firsts else float('nan'):.2f} s, p50/p99 {pct(values, 0.5):.2f}/{pct(values, 0.99):.2f} s "
        f"({len(values)} prompts{f', {censored} unanswered' if censored else ''}), "
        f"{getattr(res.engine, 'preemptions', 0)} preemptions"
    )
    print(line)
    return (f"a flood alone, then a chatting user (headroom {lent})", line, "")


def realtime(
    backend: str,
    seconds: float,
    seed: int,
    figures: tuple[str, ...],
    headrooms: tuple[int, ...] = (0, 4, 8),
    compared: tuple[str, ...] = COMPARED,
    *,
    gate: GatePolicy = GATE,
) -> None:
    """The figures in real time against the engine ``ENGINE_*`` configures, with ``backend`` (vllm or simulated)."""
    import asyncio
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    import django

    django.setup()
    from django.conf import settings

    from deployments.tokenizer import get_tokenizer
    from inference_workers.engine import build_engine

    config = dataclasses.replace(settings.ENGINE, backend=backend)
    step_budget: int | str = "vLLM's default"
    if backend == "vllm":
        from inference_workers.engine.vllm_engine import step_token_budget

        step_budget = step_token_budget(config) or step_budget
    warm = min(15.0, seconds / 4)
    print(
        f"Real time on the {backend} engine ({config.model_path}, {config.dtype}, {config.max_num_seqs} slots, "
        f"step budget {step_budget} tokens: ENGINE_MAX_NUM_BATCHED_TOKENS); "
        f"the shipped gates (SCHED_GATES), {gate.headroom_slots} headroom slots, tick {settings.SCHEDULER.tick_s} s, "
        f"heartbeats every {settings.WORKERS.heartbeat_interval_s} s; figures exclude the first {warm:.0f} s."
    )
    rows: list[tuple[str, str, str]] = []

    async def main() -> None:
        engine = build_engine(config)
        started = time.monotonic()
        await engine.start()
        bench = RealtimeBench(
            engine,
            config.max_num_seqs,
            get_tokenizer(),
            tick_s=settings.SCHEDULER.tick_s,
            heartbeat_s=settings.WORKERS.heartbeat_interval_s,
        )
        print(f"engine up in {time.monotonic() - started:.0f} s")
        light = [Workload(user=1, tier="free", rate_per_s=0.0, prompt=100, output=8, think_s=1.0)]
        light.append(dataclasses.replace(light[0], user=3))
        await bench.run(light, 8.0, gate=gate, seed=seed)  # warm-up
        if "isolation" in figures:
            print("\n== R1. Light users' TTFT (2 chatting users, 8-token answers, ~1 s think time; all free tier) ==")
            print(
                f"{'scenario':40} {'p50 s':>7} {'p99 s':>7} {'n':>4}  {'queue p99':>9} {'engine p99':>10} "
                f"{'batch':>6} {'tpot s':>7} {'tok/s':>6}"
            )
            p99s: dict[str, float] = {}
            for name, rate, length in (
                ("light alone", 0.0, 0.6),
                ("heavy at ~its share (0.55 prompts/s)", 0.55, 1.0),
                ("heavy floods at 10x (5.5 prompts/s)", 5.5, 1.5),
            ):
                heavy = [Workload(2, "free", rate, 100, 64)] if rate else []
                res = await bench.run(light + heavy, length * seconds, gate=gate, seed=seed)
                skip = warm if rate else 2.0  # a flood needs a while to fill the batch
                parts = light_parts(res, {1, 3}, skip)
                batch, tpot = mean_batch(res, skip)
                p99s[name] = pct(parts["ttft"], 0.99)
                print(
                    f"{name:40} {pct(parts['ttft'], 0.5):7.2f} {p99s[name]:7.2f} {len(parts['ttft']):4d}  "
                    f"{pct(parts['queue'], 0.99):9.2f} {pct(parts['engine'], 0.99):10.2f} {batch:6.1f} {tpot:7.3f} "
                    f"{tokens_per_s(res, skip):6.1f}"
                )
                rows.append(
                    (f"light TTFT p50 / p99: {name}", f"{pct(parts['ttft'], 0.5):.2f} / {p99s[name]:.2f} s", "")
                )
                print_vllm_split(parts)
            flood = p99s["heavy floods at 10x (5.5 prompts/s)"]
            r_share = flood / p99s["heavy at ~its share (0.55 prompts/s)"]
            r_alone = flood / p99s["light alone"]
            print(f"p99 ratio flood / heavy-at-share {r_share:.2f}, flood / alone {r_alone:.2f}   (target <= 1.2)")
            print("(queue: arrival to dispatch; engine: dispatch to first token; batch/tpot: heartbeats' mean)")
            rows.append(
                ("light TTFT p99 ratio, flood / at share; flood / alone", f"{r_share:.2f}; {r_alone:.2f}", "<= 1.2")
            )
        if "arrival" in figures:
            rows.append(await arrival_figure(bench, seconds, seed, gate=gate, warm=warm))
        if "jain" in figures:
            print("\n== R2. Jain's index among 4 equally weighted backlogged free-tier users of different sizes ==")
            sizes = [(32, 16), (64, 32), (128, 48), (256, 64)]
            workloads = [Workload(10 + k, "free", 3.0, p, o) for k, (p, o) in enumerate(sizes)]
            length = 1.5 * seconds
            res = await bench.run(workloads, length, gate=gate, seed=seed)
            users = [w.user for w in workloads]
            generated = [(t, u, float(n)) for t, u, _, n in res.engine.produced]
            service = generated + [(r.first_token, r.user, float(r.prompt)) for r in res.requests if r.first_token]
            print("(prompt, max output) tokens: " + ", ".join(f"{p}/{o}" for p, o in sizes))
            for window in (10.0, 30.0):
                gen_j = jain_per_window(generated, users, start=warm, end=length, window=window)
                svc_j = jain_per_window(service, users, start=warm, end=length, window=window)
                if not gen_j:
                    continue
                print(
                    f"window {window:4.0f} s: Jain of output tokens generated min {min(gen_j):.3f} mean "
                    f"{statistics.fmean(gen_j):.3f}; of input+output tokens served min {min(svc_j):.3f} mean "
                    f"{statistics.fmean(svc_j):.3f}  ({len(gen_j)} windows; target >= 0.95)"
                )
                rows.append(
                    (
                        f"Jain, min over {window:.0f} s windows: output / input+output",
                        f"{min(gen_j):.3f} / {min(svc_j):.3f}",
                        ">= 0.95",
                    )
                )
            per_user: dict[int, int] = defaultdict(int)
            for t, u, _, n in res.engine.produced:
                if t >= warm:
                    per_user[u] += n
            print("output tokens per user: " + ", ".join(f"user {u}: {n}" for u, n in sorted(per_user.items())))
        if "tiers" in figures:
            print("\n== R3. Tier shares under contention (one user per tier, each sending 3 prompts/s) ==")
            workloads = [
                Workload(20 + k, tier, 3.0, 100, 64) for k, tier in enumerate(("pro", "plus", "free", "batch"))
            ]
            res = await bench.run(workloads, 1.5 * seconds, gate=gate, seed=seed)
            settle = 2 * warm  # runs dispatched at the start (batch too, while the engine was idle) end by then
            print(f"(tokens served and runs dispatched after the first {settle:.0f} s)")
            served = served_by_tier(res, settle)
            charged: dict[str, float] = defaultdict(float)
            for t, r in res.dispatched:
                if t >= settle:
                    charged[r.tier] += r.prompt + r.max_tokens
            total, total_c = sum(served.values()) or 1.0, sum(charged.values()) or 1.0
            for tier in ("pro", "plus", "free", "batch"):
                print(
                    f"{tier:6} served {served[tier] / total:6.3f}   dispatched {charged[tier] / total_c:6.3f}   "
                    f"configured {TIER_CONFIGURED[tier]:.3f}{TIER_NOTE[tier]}"
                )
            rows.append(
                (
                    "tier shares, tokens served; dispatched (pro / plus / free / batch)",
                    " / ".join(f"{served[t] / total:.2f}" for t in ("pro", "plus", "free", "batch"))
                    + "; "
                    + " / ".join(f"{charged[t] / total_c:.2f}" for t in ("pro", "plus", "free", "batch")),
                    "0.7 / 0.2 / 0.1 / 0",
                )
            )
        if "throughput" in figures:
            print("\n== R4. Throughput with gating vs without (saturated: 8 users across tiers, 1 prompt/s each) ==")
            workloads = [Workload(30 + k, ("pro", "plus", "free")[k % 3], 1.0, 150, 96) for k in range(8)]
            figures_tp = []
            for name, tried in (("gated", gate), ("ungated", OPEN_GATE)):
                res = await bench.run(workloads, seconds, gate=tried, seed=seed)
                assert isinstance(res.engine, Trace)
                batch, tpot = mean_batch(res, warm)
                figures_tp.append(tokens_per_s(res, warm))
                print(
                    f"{name:8} {figures_tp[-1]:6.1f} output tok/s, mean batch {batch:.1f}, tpot {tpot:.3f} s, "
                    f"engine waiting peak {res.engine.peak_waiting}"
                )
            print(f"ratio gated / ungated {figures_tp[0] / figures_tp[1]:.3f}   (target >= 0.95)")
            rows.append(
                (
                    "throughput gated vs ungated",
                    f"{figures_tp[0]:.1f} vs {figures_tp[1]:.1f} tok/s = {figures_tp[0] / figures_tp[1]:.3f}",
                    ">= 0.95",
                )
            )
        baseline = None
        if "ttft" in figures:
            baseline = await compare_ttft(bench, seconds, warm, seed, table, compared, gate=gate)
        if "compare" in figures:
            print("\nSchedulers: " + "; ".join(f"{k}: {SCHEDULERS[k]}" for k in compared))
            baseline = await compare_ttft(bench, seconds, warm, seed, table, compared, gate=gate)
            await compare_backlogged(bench, seconds, warm, seed, table, compared, gate=gate)
            await compare_tiers(bench, seconds, warm, seed, table, compared, gate=gate)
            await compare_throughput(bench, seconds, warm, seed, table, compared, gate=gate)
        if "curve" in figures:
            budget = str(step_budget)
            curve.extend(
                await tradeoff_curve(
                    bench, seconds, warm, seed, headrooms, at_share_p99=baseline, budget=budget, gate=gate
                )
            )
        await engine.shutdown()

    table: Table = []
    curve: list[str] = []
    started = time.time()
    asyncio.run(main())
    print_summary(backend, rows=rows, table=table, curve=curve, compared=compared)
    print(f"(wall time {time.time() - started:.0f} s)")
