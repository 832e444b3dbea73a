"""The token bucket's Lua scripts (``scheduling.token_bucket``) against the test Redis, with a fake clock."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings

from scheduling.policy import QueuedRun
from scheduling.redis_store import RedisQueueStore
from scheduling.token_bucket import BucketTimeouts, Limits, RefusalReason, TokenBuckets, run_member

LIMITS = Limits(bucket_capacity_tokens=1000, bucket_refill_per_s=10.0, max_concurrent_runs=3, queue_depth_limit=100)
TIMEOUTS = BucketTimeouts(pending_ttl_s=60, run_ttl_s=3600, queue_retry_after_s=7)


@pytest.fixture
def admission(clean_redis: redis.Redis) -> TokenBuckets:
    return TokenBuckets(clean_redis, TIMEOUTS)


def test_bucket_reserves_and_refills_at_the_tier_rate(admission: TokenBuckets) -> None:
    t0 = 1_000.0
    first = admission.admit(user_id=1, tier="free", cost=600, limits=LIMITS, now=t0)
    assert first.admitted and first.detail == 400
    refused = admission.admit(user_id=1, tier="free", cost=600, limits=LIMITS, now=t0 + 5)
    assert not refused.admitted and refused.reason == RefusalReason.TOKENS
    assert refused.detail == pytest.approx(450)  # 400 + 5 s x 10/s
    assert refused.retry_after_s == pytest.approx(15.0)  # (600 - 450) / 10
    assert not admission.admit(user_id=1, tier="free", cost=600, limits=LIMITS, now=t0 + 19.9).admitted
    assert admission.admit(user_id=1, tier="free", cost=600, limits=LIMITS, now=t0 + 20).admitted
    # Refill stops at the capacity.
    assert admission.bucket_tokens(user_id=1, limits=LIMITS, now=t0 + 10_000) == 1000
    # Users do not share buckets.
    assert admission.admit(user_id=2, tier="free", cost=1000, limits=LIMITS, now=t0).admitted


def test_refund_of_the_unused_part_when_the_run_ends(admission: TokenBuckets) -> None:
    t0 = 1_000.0
    d = admission.admit(user_id=1, tier="free", cost=700, limits=LIMITS, now=t0)
    assert admission.bind(user_id=1, tier="free", reservation_id=d.reservation_id, run_id=42, now=t0)
    assert admission.reservations(user_id=1) == {run_member(42): 700}
    refund = admission.settle(user_id=1, tier="free", member=run_member(42), used_tokens=250, limits=LIMITS, now=t0 + 2)
    assert refund == 450
    assert admission.bucket_tokens(user_id=1, limits=LIMITS, now=t0 + 2) == pytest.approx(300 + 20 + 450)
    # Settling twice refunds nothing more.
    assert (
        admission.settle(user_id=1, tier="free", member=run_member(42), used_tokens=0, limits=LIMITS, now=t0 + 2) == -1
    )
    assert admission.bucket_tokens(user_id=1, limits=LIMITS, now=t0 + 2) == pytest.approx(770)


def test_refund_never_overfills_the_bucket_or_goes_negative(admission: TokenBuckets) -> None:
    t0 = 1_000.0
    d = admission.admit(user_id=1, tier="free", cost=500, limits=LIMITS, now=t0)
    assert (
        admission.settle(user_id=1, tier="free", member=d.reservation_id, used_tokens=900, limits=LIMITS, now=t0) == 0
    )
    d = admission.admit(user_id=1, tier="free", cost=100, limits=LIMITS, now=t0 + 1000)
    assert (
        admission.settle(user_id=1, tier="free", member=d.reservation_id, used_tokens=0, limits=LIMITS, now=t0 + 1000)
        == 100
    )
    assert admission.bucket_tokens(user_id=1, limits=LIMITS, now=t0 + 1000) == 1000


def test_concurrency_cap_counts_open_reservations(admission: TokenBuckets) -> None:
    t0 = 1_000.0
    ids = [admission.admit(user_id=1, tier="free", cost=10, limits=LIMITS, now=t0).reservation_id for _ in range(3)]
    refused = admission.admit(user_id=1, tier="free", cost=10, limits=LIMITS, now=t0)
    assert refused.reason == RefusalReason.CONCURRENCY
    assert admission.bucket_tokens(user_id=1, limits=LIMITS, now=t0) == pytest.approx(970)  # refusal took nothing
    admission.settle(user_id=1, tier="free", member=ids[0], used_tokens=10, limits=LIMITS, now=t0)
    assert admission.admit(user_id=1, tier="free", cost=10, limits=LIMITS, now=t0).admitted


def test_queue_depth_bound_counts_queued_runs_and_pending_admissions(
    admission: TokenBuckets, clean_redis: redis.Redis
) -> None:
    limits = Limits(bucket_capacity_tokens=10_000, bucket_refill_per_s=1, max_concurrent_runs=100, queue_depth_limit=3)
    store = RedisQueueStore(clean_redis, tiers=["free"])
    store.push(QueuedRun(run_id=1, user_id=7, tier="free", cost=10))
    store.push(QueuedRun(run_id=2, user_id=8, tier="free", cost=10))
    assert admission.admit(user_id=1, tier="free", cost=10, limits=limits, now=1000.0).admitted  # pending: depth 3
    full = admission.admit(user_id=2, tier="free", cost=10, limits=limits, now=1000.0)
    assert full.reason == RefusalReason.QUEUE_FULL and full.retry_after_s == 7  # no dispatch rate known yet
    store.write_rate(2.0)
    assert admission.admit(user_id=2, tier="free", cost=10, limits=limits, now=1000.0).retry_after_s == 0.5
    assert admission.admit(user_id=2, tier="plus", cost=10, limits=limits, now=1000.0).admitted  # other tier


def test_a_prompt_larger_than_the_bucket_is_refused_for_good(admission: TokenBuckets) -> None:
    assert admission.admit(user_id=1, tier="free", cost=1001, limits=LIMITS, now=1.0).reason == RefusalReason.TOO_LARGE


def test_reservations_of_a_dead_process_heal_after_their_expiry(admission: TokenBuckets) -> None:
    t0 = 1_000.0
    for _ in range(3):  # admitted, never bound nor released: the web process died
        admission.admit(user_id=1, tier="free", cost=10, limits=LIMITS, now=t0)
    assert admission.admit(user_id=1, tier="free", cost=10, limits=LIMITS, now=t0 + 59).reason == (
        RefusalReason.CONCURRENCY
    )
    assert admission.admit(user_id=1, tier="free", cost=10, limits=LIMITS, now=t0 + 61).admitted
    # A bound run's reservation lives as long as a run may, then heals too.
    d = admission.admit(user_id=5, tier="free", cost=10, limits=LIMITS, now=t0)
    admission.bind(user_id=5, tier="free", reservation_id=d.reservation_id, run_id=9, now=t0)
    admission.admit(user_id=5, tier="free", cost=10, limits=LIMITS, now=t0 + 3000)
    assert run_member(9) in admission.reservations(user_id=5)  # a pending one would be gone by now
    admission.admit(user_id=5, tier="free", cost=10, limits=LIMITS, now=t0 + 3601)
    assert run_member(9) not in admission.reservations(user_id=5)


def test_no_overshoot_across_two_processes_in_a_concurrent_burst(clean_redis: redis.Redis) -> None:
    """Two processes (two web replicas) race 300 admissions each on one user's bucket."""
    cost = 400  # input + max output of one request
    root = Path(__file__).resolve().parents[2]
    started = time.time() + 2.0
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.scheduling.burst_worker",
                settings.REDIS_URL,
                "77",
                str(cost),
                "300",
                str(started),
            ],
            cwd=root,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    admitted = [int(p.communicate(timeout=120)[0].strip()) for p in procs]
    elapsed = time.time() - started + 0.1
    budget = 10_000 + 5.0 * elapsed  # capacity + refill during the burst
    assert all(p.returncode == 0 for p in procs)
    assert sum(admitted) >= 10_000 - cost  # both raced for the whole budget...
    assert sum(admitted) <= budget + cost  # ...and never got more than it (plus at most one request)
