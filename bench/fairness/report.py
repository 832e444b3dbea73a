"""How the figures are printed where more than one run prints them: the configured tier shares beside the
measured ones, vLLM's own split of a request's time, and the real-time runs' summary tables."""

from __future__ import annotations

from bench.fairness.realtime import SCHEDULERS
from bench.fairness.stats import pct

TIER_CONFIGURED = {"pro": 0.7, "plus": 0.2, "free": 0.1, "batch": 0.0}
TIER_NOTE = {
    "pro": "  (strict priority: the rest after the floors)",
    "plus": "  (floor)",
    "free": "  (floor)",
    "batch": "  (only when idle)",
}


Table = list[tuple[str, dict[str, str], str]]
"""(figure, scheduler -> measured, target) rows of the side-by-side summary."""


def print_vllm_split(parts: dict[str, list[float]]) -> None:
    """vLLM's own split of dispatch -> first token (its per-request timestamps), when the engine reports it."""
    if "vllm_waiting_s" not in parts:
        return
    cols = ("submit_s", "waiting_s", "prefill_s", "output_s")
    print(
        "    inside vLLM, p50 / p99 s: "
        + ", ".join(f"{c[:-2]} {pct(parts['vllm_' + c], 0.5):.2f} / {pct(parts['vllm_' + c], 0.99):.2f}" for c in cols)
        + f"; preempted {sum(1 for x in parts['vllm_preemptions'] if x)} of {len(parts['vllm_preemptions'])}"
    )


def print_summary(
    backend: str,
    *,
    rows: list[tuple[str, str, str]],
    table: Table,
    curve: list[str],
    compared: tuple[str, ...],
) -> None:
    """The real-time runs' summary: ours' figures (R1-R4), the schedulers side by side (C1-C4), the curve (C5)."""
    print(f"\n== Summary ({backend}, real time) ==")
    if rows:
        print(f"| {'figure':62} | {'measured':28} | target |")
        for figure, measured, target in rows:
            print(f"| {figure:62} | {measured:28} | {target:6} |")
    if table:
        print("| figure | " + " | ".join(SCHEDULERS[k].split(":")[0] for k in compared) + " | target |")
        print("| --- " * (len(compared) + 2) + "|")
        for figure, by_sched, target in table:
            print(f"| {figure} | " + " | ".join(by_sched.get(k, "") for k in compared) + f" | {target} |")
    for line in curve:
        print(line)
