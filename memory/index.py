"""Each web process's vector index of the memories (``core.vector_index``), and how it follows Postgres.

One partition per user and embedding model (:func:`index_key`): a user's memories are searched only among their own.
A user with few memories is searched exactly; from ``MEMORY_HNSW_MIN_ENTRIES`` their memories get an HNSW graph.

**Consistency across web processes** (each has its own index; Postgres is the record): the memories other
processes stored are read before a recall, at most every ``MEMORY_SYNC_MS`` (with a ``MEMORY_SYNC_OVERLAP_S``
overlap); the process that stores one adds it at once. A deleted memory may linger in another process's index until
its next reconcile (``MEMORY_RECONCILE_S``), but never reaches a prompt: every candidate's row is read, and must
exist and be the user's, before it is recalled (``memory.selectors.memories_for_recall``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from core.vector_index import IndexedRow, ProcessIndex, SemanticIndex, catch_up, unpack
from memory.selectors import live_memory_ids, memories_to_index


def index_key(user_id: int, embedding_model: str) -> str:
    return f"user:{user_id}|{embedding_model}"


def _rows(watermark: int) -> Iterator[IndexedRow]:
    since = timezone.now() - timedelta(seconds=settings.MEMORY.sync_overlap_s)
    for memory_id, user_id, model, raw in memories_to_index(after_id=watermark, created_since=since):
        yield IndexedRow(id=memory_id, index_key=index_key(user_id, model), vector=unpack(raw))


def index_catch_up(index: SemanticIndex, *, force: bool = False) -> int:
    """Adds the memories other processes stored since the last catch-up (when one is due, or ``force``), and drops
    the deleted ones every ``MEMORY_RECONCILE_S``. Returns the memories added."""
    return catch_up(index, rows=_rows, live_ids=live_memory_ids, reconcile_s=settings.MEMORY.reconcile_s, force=force)


_holder = ProcessIndex(
    lambda: SemanticIndex(hnsw_min=settings.MEMORY.hnsw_min_entries, sync_ms=settings.MEMORY.sync_ms)
)
process_index = _holder.get
"""This process's index (made on first use)."""
reset_process_index = _holder.reset
"""Forget this process's index (tests that flush the database; the next lookup reads every row again)."""
