"""Each tier's route policy before an admin edits it (the data migration and the selector's fallback share this)."""

from __future__ import annotations

from typing import Any

SPILL_BY_DEFAULT = frozenset({"free", "plus"})
"""Tiers that spill to the small model while the large one's gate is closed for them. ``pro`` waits for the large
model; ``batch`` waits for idle engines by design. Free spills first because its gate is the strictest
(``SCHED_GATES``: free=1:0.75 closes before plus=2:1.0 and pro=4:2.0)."""


def default_policy_fields(tier_name: str) -> dict[str, Any]:
    """The field values of a new ``RoutePolicy`` for the tier named ``tier_name``."""
    return {
        "enabled": True,
        "default_model_auto": False,
        "small_model": "",
        "large_model": "",
        "max_small_prompt_tokens": 1024,
        "max_small_output_tokens": 512,
        "tools_need_large": True,
        "structured_needs_large": True,
        "difficulty_threshold": 0.5,
        "spill_enabled": tier_name in SPILL_BY_DEFAULT,
    }
