"""The dispatcher's published gate states: whether each tier's gate admits a run on each deployment right now.

The leading dispatcher rewrites one Redis hash at most once a second (``runs.dispatcher_figures``) with a short
TTL, so a dead dispatcher leaves no gate behind. Besides ``/metrics``, the web processes read it to route around a
full deployment (``model_routing``: load-aware spill). This module holds the key, the field names and the parsing
that both sides share (it sits below both).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

GATE_STATE_KEY = "metrics:dispatcher:state"
GATE_STATE_TTL_S = 10
"""The gate states outlive the leader's last write by this long."""


def gate_field(tier: str, deployment: str) -> str:
    """The hash field of ``(tier, deployment)``'s gate: 1 open, 0 closed."""
    return f"gate|{tier}|{deployment}"


def parse_gate_states(state: Mapping[Any, Any]) -> dict[tuple[str, str], bool]:
    """``(tier, deployment)`` -> open, from the hash as read (other fields are ignored)."""
    gates: dict[tuple[str, str], bool] = {}
    for key, value in state.items():
        parts = (key.decode() if isinstance(key, bytes) else str(key)).split("|")
        if parts[0] == "gate" and len(parts) == 3:
            gates[(parts[1], parts[2])] = float(value) > 0
    return gates


def read_gate_states(client: redis.Redis) -> dict[tuple[str, str], bool]:
    """The gates as last published; empty when no dispatcher led within ``GATE_STATE_TTL_S``."""
    return parse_gate_states(client.hgetall(GATE_STATE_KEY))
