"""The statistics the figures are made of: percentiles, TTFT splits, throughput, Jain's index, VTC's service
difference, tier shares; read from a ``Result`` of either the simulation or a real-time run."""

from __future__ import annotations

import statistics
from collections import defaultdict

from bench.fairness.workload import Request, Result, Trace


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ttfts(result: Result, user: int, warmup: float) -> list[float]:
    return [
        r.first_token - r.arrival
        for r in result.requests
        if r.user == user and r.first_token is not None and r.arrival >= warmup
    ]


def tokens_per_s(result: Result, start: float) -> float:
    total = sum(n for t, _, _, n in result.engine.produced if t >= start)
    return total / (result.horizon - start)


def jain(xs: list[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else float("nan")


def jain_per_window(
    events: list[tuple[float, int, float]], users: list[int], *, start: float, end: float, window: float
) -> list[float]:
    """Jain's index of each user's total of ``(time, user, amount)`` events, per window from ``start`` to ``end``."""
    out = []
    while start + window <= end:
        per: dict[int, float] = defaultdict(float)
        for t, user, amount in events:
            if start <= t < start + window:
                per[user] += amount
        out.append(jain([per[u] for u in users]))
        start += window
    return out


def light_parts(result: Result, users: set[int], warmup: float) -> dict[str, list[float]]:
    """The light users' TTFT split: waiting in the dispatcher's queue, then in the engine until the first token
    (virtual time also splits that into waiting for a step to start and the first step itself)."""
    rows = [
        r
        for r in result.requests
        if r.user in users and r.first_token is not None and r.dispatched_at is not None and r.arrival >= warmup
    ]
    parts: dict[str, list[float]] = {
        "ttft": [r.first_token - r.arrival for r in rows if r.first_token is not None],
        "queue": [r.dispatched_at - r.arrival for r in rows if r.dispatched_at is not None],
        "engine": [
            r.first_token - r.dispatched_at for r in rows if r.first_token is not None and r.dispatched_at is not None
        ],
        "batch": [float(r.batch) for r in rows],
    }
    timed = [r.timing for r in rows if r.timing is not None]
    if timed:
        for name in ("submit_s", "waiting_s", "prefill_s", "output_s"):
            parts[f"vllm_{name}"] = [getattr(t, name) for t in timed]
        parts["vllm_preemptions"] = [float(t.preemptions) for t in timed]
    if all(r.started_at is not None for r in rows):
        parts["to_step"] = [r.started_at - r.dispatched_at for r in rows if r.started_at and r.dispatched_at]
        parts["first_step"] = [r.first_token - r.started_at for r in rows if r.first_token and r.started_at]
    return parts


def backlogged_intervals(requests: list[Request], user: int, *, end: float) -> list[tuple[float, float]]:
    """The spans during which ``user`` always had a prompt sent and not yet answered (queued anywhere: in our
    queues or in vLLM's waiting queue, or running)."""
    events = sorted(
        [(r.arrival, 1) for r in requests if r.user == user]
        + [(r.ended if r.ended is not None else end, -1) for r in requests if r.user == user]
    )
    spans: list[tuple[float, float]] = []
    pending, since = 0, 0.0
    for t, step in events:
        if pending == 0 and step > 0:
            since = t
        pending += step
        if pending == 0 and t > since:
            spans.append((since, t))
    if pending > 0:
        spans.append((since, end))
    return spans


def service_events(res: Result) -> list[tuple[float, int, float]]:
    """VTC's service with our cost weights (1 per input token, 1 per output token): a request's prompt counts when
    its first token came (its prefill done), each output token when it came."""
    events = [(t, u, float(n)) for t, u, _, n in res.engine.produced]
    events += [(r.first_token, r.user, float(r.prompt)) for r in res.requests if r.first_token is not None]
    return sorted(events)


def service_difference(res: Result, users: list[int], *, start: float, end: float) -> tuple[float, int]:
    """VTC's fairness metric: the largest difference in service between two users over any window in which both
    were continuously backlogged, ``max |W_i(a, b) - W_j(a, b)|``, with the largest request cost (input + max output
    tokens, what admission charges). For one pair and one common backlogged span it is the range of
    ``S_i(t) - S_j(t)`` over the span (the largest rise or fall of the running difference)."""
    events = service_events(res)
    spans = {u: backlogged_intervals(res.requests, u, end=end) for u in users}
    worst = 0.0
    for i, a in enumerate(users):
        for b in users[i + 1 :]:
            for sa, ea in spans[a]:
                for sb, eb in spans[b]:
                    lo, hi = max(sa, sb, start), min(ea, eb, end)
                    if hi <= lo:
                        continue
                    diff = top = bottom = 0.0
                    for t, u, n in events:
                        if t < lo or t > hi or u not in (a, b):
                            continue
                        diff += n if u == a else -n
                        top, bottom = max(top, diff), min(bottom, diff)
                    worst = max(worst, top - bottom)
    largest = max((r.prompt + r.max_tokens for r in res.requests if r.user in users), default=1)
    return worst, largest


def served_by_tier(res: Result, settle: float) -> dict[str, float]:
    """Tokens served per tier after ``settle``: output tokens as generated, a prompt when its first token came."""
    served: dict[str, float] = defaultdict(float)
    for t, _, tier, n in res.engine.produced:
        if t >= settle:
            served[tier] += n
    for r in res.requests:
        if r.first_token is not None and r.first_token >= settle:
            served[r.tier] += r.prompt
    return served


def user_tokens_per_s(res: Result, user: int, start: float) -> float:
    return sum(n for t, u, _, n in res.engine.produced if u == user and t >= start) / (res.horizon - start)


def light_ttfts(res: Result, users: set[int], warmup: float) -> tuple[list[float], int]:
    """The users' TTFTs of prompts sent after ``warmup``; a prompt still without a first token at the end counts
    with the time it had waited (a lower bound), so a scheduler that starves a user is not flattered. Returns the
    values and how many of them are such lower bounds."""
    values, censored = [], 0
    for r in res.requests:
        if r.user not in users or r.arrival < warmup:
            continue
        if r.first_token is None:
            values.append(res.horizon - r.arrival)
            censored += 1
        else:
            values.append(r.first_token - r.arrival)
    return values, censored


def mean_batch(res: Result, start: float) -> tuple[float, float]:
    """Mean running sequences and mean time per output token in the heartbeats after ``start``."""
    assert isinstance(res.engine, Trace)
    samples = [s for t, s in res.engine.samples if t >= start]
    tpots = [s.tpot_s for s in samples if s.tpot_s is not None]
    return (
        statistics.fmean(s.running for s in samples) if samples else float("nan"),
        statistics.fmean(tpots) if tpots else float("nan"),
    )
