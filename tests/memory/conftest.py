"""Memory's tests: a fresh process index per test, caught up on every recall, fresh tier policies, and the real
embedding worker (``manage.py run_embedding_worker``, shared with the answer cache's tests)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from memory.index import reset_process_index
from memory.selectors import forget_memory_policies
from tests.answer_cache.conftest import embedding_worker, embedding_worker_process

__all__ = ["embedding_worker", "embedding_worker_process"]


@pytest.fixture(autouse=True)
def fresh_memory(settings: Any) -> Iterator[None]:
    settings.MEMORY = dataclasses.replace(settings.MEMORY, sync_ms=0, embed_timeout_s=30.0)
    reset_process_index()
    forget_memory_policies()
    yield
    reset_process_index()
    forget_memory_policies()
