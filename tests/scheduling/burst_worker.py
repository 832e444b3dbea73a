"""A child process of the burst test: hammers the admission script for one user (another "web replica")."""

from __future__ import annotations

import sys
import time

import redis

from scheduling.token_bucket import BucketTimeouts, Limits, TokenBuckets


def main(url: str, user_id: int, cost: int, attempts: int, start_at: float) -> None:
    admission = TokenBuckets(
        redis.Redis.from_url(url, decode_responses=True),
        BucketTimeouts(pending_ttl_s=600, run_ttl_s=600, queue_retry_after_s=1),
    )
    limits = Limits(
        bucket_capacity_tokens=10_000, bucket_refill_per_s=5.0, max_concurrent_runs=10_000, queue_depth_limit=1_000_000
    )
    admitted = 0
    time.sleep(max(0.0, start_at - time.time()))  # both replicas start together
    for _ in range(attempts):
        if admission.admit(user_id=user_id, tier="free", cost=cost, limits=limits).admitted:
            admitted += cost
    print(admitted)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
