"""System-wide counters for Prometheus, kept in one Redis hash so every web process reports the same figures.

A run is counted by whichever process acts on it (a web process admits or refuses it, a worker or the reaper
ends it), so per-process counters would each see a fraction. Instead each event is one ``HINCRBY`` pipeline
on ``metrics:runs`` (one round trip, after the database commit) and ``monitoring.prometheus`` turns the hash
into Prometheus counters and histograms at scrape time.

Field names are ``<metric>|<tier>[|<label>]``. A histogram's observation increments the one bucket it falls in
(``ttft_in|pro|0.5`` for a 0.3 s TTFT), and the reader adds them up into the cumulative buckets Prometheus exposes:
one command an observation where the cumulative form took eleven. Buckets stored cumulative by earlier releases
(``ttft_bucket|pro|0.5``, every bucket from ``0.5`` up) are read and added in, so an upgrade loses no count.
Recording never raises: a metric lost while Redis is down must not fail a prompt or a run.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

import redis

from core.redis_client import get_redis
from runs.models import Run

logger = logging.getLogger(__name__)

METRICS_KEY = "metrics:runs"
LATENCY_BUCKETS_S: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Upper bounds of the TTFT and queue-wait histograms (seconds)."""
HISTOGRAMS = ("ttft", "queue_wait")


def _bucket_label(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


_BUCKET_LABELS = tuple(_bucket_label(bound) for bound in (*LATENCY_BUCKETS_S, float("inf")))


def _observe(fields: dict[str, float], name: str, tier: str, value: float) -> None:
    bound = next(bound for bound in (*LATENCY_BUCKETS_S, float("inf")) if value <= bound)
    fields[f"{name}_in|{tier}|{_bucket_label(bound)}"] = 1
    fields[f"{name}_sum|{tier}"] = value
    fields[f"{name}_count|{tier}"] = 1


def _increment(fields: dict[str, float], *, client: redis.Redis | None = None) -> None:
    try:
        pipe = (client or get_redis()).pipeline(transaction=False)
        _increments_in(pipe, fields)
        pipe.execute()
    except redis.RedisError:
        logger.warning("metrics: Redis unavailable, %d counter updates lost", len(fields))


def _increments_in(pipe: redis.client.Pipeline, fields: dict[str, float]) -> None:
    for name, amount in fields.items():
        if float(amount).is_integer():
            pipe.hincrby(METRICS_KEY, name, int(amount))
        else:
            pipe.hincrbyfloat(METRICS_KEY, name, amount)


def record_admitted_in(pipe: redis.client.Pipeline, *, tier: str) -> None:
    """A prompt was accepted and its run committed: the command queued on ``pipe``, which the caller sends with the
    rest of the admission (``runs.quota``) and whose failure it reports."""
    _increments_in(pipe, {f"admitted|{tier}": 1})


def record_refused(*, tier: str, reason: str, client: redis.Redis | None = None) -> None:
    """Admission refused a prompt (a 429, or ``too_large``); ``reason`` is the limit that was hit."""
    _increment({f"refused|{tier}|{reason}": 1}, client=client)


def record_run_end_in(pipe: redis.client.Pipeline, *, run: Run, tier: str) -> None:
    """A run ended (done, cancelled or failed): its status, tokens, time to first token and queue wait, queued on
    ``pipe``, which the caller sends with the rest of the run's settlement (``runs.quota``) and whose failure it logs.

    TTFT is what the user waited: from the POST (``created_at``) to the first token; queue wait runs until
    a worker started generating. Runs that never started count in neither histogram.
    """
    _increments_in(pipe, _run_end_fields(run=run, tier=tier))


def _run_end_fields(*, run: Run, tier: str) -> dict[str, float]:
    fields: dict[str, float] = {
        f"finished|{tier}|{run.status}": 1,
        f"input_tokens|{tier}": run.input_tokens,
        f"output_tokens|{tier}": run.output_tokens,
    }
    if run.started_at is not None:
        _observe(fields, "queue_wait", tier, max(0.0, (run.started_at - run.created_at).total_seconds()))
    if run.first_token_at is not None:
        _observe(fields, "ttft", tier, max(0.0, (run.first_token_at - run.created_at).total_seconds()))
    return fields


@dataclass
class Histogram:
    buckets: dict[str, float] = field(default_factory=dict)
    """Cumulative counts by upper bound (``"0.5"``, ..., ``"+Inf"``)."""
    sum: float = 0.0
    count: float = 0.0


@dataclass
class RunMetrics:
    """The hash, parsed: counters by label tuple, histograms by tier."""

    admitted: dict[str, float] = field(default_factory=dict)
    refused: dict[tuple[str, str], float] = field(default_factory=dict)
    finished: dict[tuple[str, str], float] = field(default_factory=dict)
    input_tokens: dict[str, float] = field(default_factory=dict)
    output_tokens: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, dict[str, Histogram]] = field(default_factory=lambda: defaultdict(dict))


def read_run_metrics(*, client: redis.Redis | None = None) -> RunMetrics:
    """Every counter recorded so far (raises ``redis.RedisError`` when Redis is down)."""
    raw = (client or get_redis()).hgetall(METRICS_KEY)
    out = RunMetrics()
    within: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)  # (histogram, tier): count by bucket
    for key, value in raw.items():
        parts = str(key).split("|")
        amount = float(value)
        name, tier = parts[0], parts[1] if len(parts) > 1 else ""
        if name == "admitted":
            out.admitted[tier] = amount
        elif name == "refused" and len(parts) == 3:
            out.refused[(tier, parts[2])] = amount
        elif name == "finished" and len(parts) == 3:
            out.finished[(tier, parts[2])] = amount
        elif name == "input_tokens":
            out.input_tokens[tier] = amount
        elif name == "output_tokens":
            out.output_tokens[tier] = amount
        else:
            base, _, part = name.rpartition("_")
            if base not in HISTOGRAMS:
                continue
            hist = out.histograms[base].setdefault(tier, Histogram())
            if part == "in" and len(parts) == 3:
                within[(base, tier)][parts[2]] = amount
            elif part == "bucket" and len(parts) == 3:  # stored cumulative by an earlier release
                hist.buckets[parts[2]] = hist.buckets.get(parts[2], 0.0) + amount
            elif part == "sum":
                hist.sum = amount
            elif part == "count":
                hist.count = amount
    for (base, tier), counts in within.items():
        hist, below = out.histograms[base][tier], 0.0
        for label in _BUCKET_LABELS:
            below += counts.get(label, 0.0)
            hist.buckets[label] = hist.buckets.get(label, 0.0) + below
    return out
