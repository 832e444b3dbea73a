"""Each web process's vector index of the cache entries (``core.vector_index``), and how it follows Postgres.

A partition (one scope and one partition digest: ``answer_cache.keys``) is searched only among its own entries, so
each partition is its own index (:func:`index_key`): an HNSW graph once it holds ``ANSWER_CACHE_HNSW_MIN_ENTRIES``
entries, an exact search below that. Most partitions (a user's own, any with history) hold a handful of entries;
the large ones (a tier's shared partition, a user's repeated questions to one model) get the graph.

**Consistency across web processes** (each has its own index; Postgres is the record):

* *New entries* written by another process are read before a lookup, at most every ``ANSWER_CACHE_SYNC_MS``
  (``answer_cache.sync``), with an ``ANSWER_CACHE_SYNC_OVERLAP_S`` overlap. The process that stores an entry adds it
  at once.
* *Deletions, purges, expiry, retirement*: a hit is a candidate only. Its row is read (one primary-key query) and
  must exist, be unexpired, belong to the same scope and partition, and its deployment must not be retired; a
  candidate that fails is dropped from the index and the next one is tried. Every ``ANSWER_CACHE_RECONCILE_S`` a
  pass drops the entries whose rows are gone or expired, so the index does not grow with dead entries.
* *A new process* starts empty and reads every live row on its first lookup (watermark 0).
"""

from __future__ import annotations

from django.conf import settings

from core.vector_index import ProcessIndex, SemanticIndex


def index_key(scope: str, partition: str) -> str:
    return f"{scope}|{partition}"


_holder = ProcessIndex(
    lambda: SemanticIndex(hnsw_min=settings.ANSWER_CACHE.hnsw_min_entries, sync_ms=settings.ANSWER_CACHE.sync_ms)
)
process_index = _holder.get
"""This process's index (made on first use)."""
reset_process_index = _holder.reset
"""Forget this process's index (tests that flush the database; the next lookup reads every row again)."""
