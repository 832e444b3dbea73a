"""The tiers every installation starts with (seeded by a data migration; editable in the admin)."""

from __future__ import annotations

from typing import Any

DEFAULT_TIERS: list[dict[str, Any]] = [
    {
        "name": "pro",
        "priority": 0,
        "bucket_capacity_tokens": 200_000,
        "bucket_refill_per_s": 200.0,
        "max_concurrent_runs": 8,
        "max_output_tokens": 2048,
        "queue_depth_limit": 1000,
        "share_floor": 0.0,
        "context_limit_tokens": 8192,
    },
    {
        "name": "plus",
        "priority": 1,
        "bucket_capacity_tokens": 100_000,
        "bucket_refill_per_s": 50.0,
        "max_concurrent_runs": 4,
        "max_output_tokens": 1024,
        "queue_depth_limit": 1000,
        "share_floor": 0.2,
        "context_limit_tokens": 4096,
    },
    {
        "name": "free",
        "priority": 2,
        "bucket_capacity_tokens": 20_000,
        "bucket_refill_per_s": 10.0,
        "max_concurrent_runs": 2,
        "max_output_tokens": 512,
        "queue_depth_limit": 500,
        "share_floor": 0.1,
        "context_limit_tokens": 2048,
    },
    {
        "name": "batch",
        "priority": 3,
        "bucket_capacity_tokens": 500_000,
        "bucket_refill_per_s": 500.0,
        "max_concurrent_runs": 32,
        "max_output_tokens": 2048,
        "queue_depth_limit": 10_000,
        "share_floor": 0.0,
        "context_limit_tokens": 4096,
    },
]


def seed_default_tiers(tier_model: Any) -> None:
    """Creates the default tiers that are missing; leaves edited ones alone."""
    for spec in DEFAULT_TIERS:
        fields = {k: v for k, v in spec.items() if k != "name"}
        tier_model.objects.get_or_create(name=spec["name"], defaults=fields)
