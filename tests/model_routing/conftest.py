from __future__ import annotations

from collections.abc import Iterator

import pytest

from model_routing.gates import published_gates
from model_routing.selectors import forget_route_policies


@pytest.fixture(autouse=True)
def fresh_router_caches() -> Iterator[None]:
    """Each test reads the policies and the published gates afresh (the web process keeps them for a while)."""
    forget_route_policies()
    published_gates.clear()
    yield
    forget_route_policies()
    published_gates.clear()
