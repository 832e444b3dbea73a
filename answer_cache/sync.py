"""How a process's index catches up with Postgres (the rules are in ``answer_cache.index``'s docstring)."""

from __future__ import annotations

import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from answer_cache.index import IndexedRow, SemanticIndex, index_key, unpack
from answer_cache.selectors import entries_to_index, live_entry_ids


def index_catch_up(index: SemanticIndex, *, force: bool = False) -> int:
    """Adds the entries other processes stored since the last catch-up (when one is due: ``ANSWER_CACHE_SYNC_MS``,
    or ``force``), and drops the dead ones every ``ANSWER_CACHE_RECONCILE_S``. Returns the entries added.

    One thread at a time; a thread that finds another catching up goes on with the index as it is."""
    lock = index.sync_lock(force=force)
    if lock is None:
        return 0
    try:
        now = timezone.now()
        config = settings.ANSWER_CACHE
        rows = entries_to_index(
            after_id=index.watermark, created_since=now - timedelta(seconds=config.sync_overlap_s), now=now
        )
        added = index.add(
            IndexedRow(id=entry_id, index_key=index_key(scope, partition), vector=unpack(raw))
            for entry_id, scope, partition, raw in rows
            if entry_id not in index
        )
        if time.monotonic() - index.reconciled_at >= config.reconcile_s:
            index_reconcile(index)
        index.synced_at = time.monotonic()
        return added
    finally:
        lock.release()


def index_reconcile(index: SemanticIndex) -> int:
    """Drops the entries whose rows are gone, expired or retired; returns how many."""
    dead = index.held_ids() - live_entry_ids(now=timezone.now())
    index.discard(dead)
    index.reconciled_at = time.monotonic()
    return len(dead)
