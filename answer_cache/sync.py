"""How a process's index catches up with Postgres (``core.vector_index.catch_up``; the rules are in
``answer_cache.index``'s docstring)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from answer_cache.index import index_key
from answer_cache.selectors import entries_to_index, live_entry_ids
from core.vector_index import IndexedRow, SemanticIndex, catch_up, reconcile, unpack


def _rows(watermark: int) -> Iterator[IndexedRow]:
    now = timezone.now()
    rows = entries_to_index(
        after_id=watermark, created_since=now - timedelta(seconds=settings.ANSWER_CACHE.sync_overlap_s), now=now
    )
    for entry_id, scope, partition, raw in rows:
        yield IndexedRow(id=entry_id, index_key=index_key(scope, partition), vector=unpack(raw))


def _live_ids() -> set[int]:
    return live_entry_ids(now=timezone.now())


def index_catch_up(index: SemanticIndex, *, force: bool = False) -> int:
    """Adds the entries other processes stored since the last catch-up (when one is due: ``ANSWER_CACHE_SYNC_MS``,
    or ``force``), and drops the dead ones every ``ANSWER_CACHE_RECONCILE_S``. Returns the entries added."""
    return catch_up(index, rows=_rows, live_ids=_live_ids, reconcile_s=settings.ANSWER_CACHE.reconcile_s, force=force)


def index_reconcile(index: SemanticIndex) -> int:
    """Drops the entries whose rows are gone, expired or retired; returns how many."""
    return reconcile(index, live_ids=_live_ids)
