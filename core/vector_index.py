"""An in-memory vector index derived from Postgres rows, one per process: partitions searched apart, each an exact
SIMD search while small and an HNSW graph once large, and how it catches up with the rows other processes write.

**The library**: usearch (Unum's single-file HNSW engine; Apache-2.0; wheels for CPython 3.11 on x86-64, works
with the venv's numpy 2). Inner product on unit vectors, so similarity = 1 - distance. A graph reserves about 50 KB
even for one vector, so a partition gets one only from ``hnsw_min`` entries; below that usearch's exact search
(``usearch.index.search(..., exact=True)``) is both cheaper and exact.

**Catching up** (:func:`catch_up`; each process has its own :class:`SemanticIndex`, Postgres is the record): the rows
with an id above the highest id seen (the watermark) are read at most every ``sync_ms``, plus those created within
an overlap (an id is taken before its row commits, so a row can appear after a higher one; ids already held are
skipped). One thread catches up at a time; the others search what is there. Deletions are the caller's check: a hit
is a candidate only, whose row is read before it is used; every ``reconcile_s`` the ids whose rows are gone are
dropped. A new process starts empty and reads every live row on its first catch-up (watermark 0).

Used by the semantic answer cache (``answer_cache``) and cross-chat memory (``memory``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from usearch.index import Index, MetricKind
from usearch.index import search as exact_search

Vector = np.ndarray


def to_unit(vector: Iterable[float]) -> Vector:
    """A float32 copy of ``vector`` scaled to unit length (the embedding model normalizes; this makes sure)."""
    array = np.asarray(list(vector) if not isinstance(vector, np.ndarray) else vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


def pack(vector: Vector) -> bytes:
    return to_unit(vector).astype("<f4").tobytes()


def unpack(raw: bytes | memoryview) -> Vector:
    return np.frombuffer(bytes(raw), dtype="<f4").astype(np.float32)


@dataclass(frozen=True)
class IndexedRow:
    """What the index needs of one entry."""

    id: int
    index_key: str
    vector: Vector


class PartitionIndex:
    """One partition's entries: an exact search below ``hnsw_min`` entries, an HNSW graph from then on."""

    def __init__(self, ndim: int, hnsw_min: int) -> None:
        self.ndim = ndim
        self.hnsw_min = hnsw_min
        self._keys = np.empty(0, dtype=np.uint64)
        self._vectors = np.empty((0, ndim), dtype=np.float32)
        self._graph: Index | None = None

    def __len__(self) -> int:
        return len(self._graph) if self._graph is not None else len(self._keys)

    @property
    def is_graph(self) -> bool:
        return self._graph is not None

    def add(self, key: int, vector: Vector) -> None:
        if self._graph is not None:
            self._graph.add(key, vector)
            return
        self._keys = np.append(self._keys, np.uint64(key))
        self._vectors = np.vstack([self._vectors, vector[None, :]])
        if len(self._keys) >= self.hnsw_min:
            graph = Index(ndim=self.ndim, metric=MetricKind.IP, dtype="f32")
            graph.add(self._keys, self._vectors)
            self._graph = graph
            self._keys = np.empty(0, dtype=np.uint64)
            self._vectors = np.empty((0, self.ndim), dtype=np.float32)

    def remove(self, key: int) -> None:
        if self._graph is not None:
            self._graph.remove(key)
            return
        keep = self._keys != np.uint64(key)
        self._keys, self._vectors = self._keys[keep], self._vectors[keep]

    def search(self, query: Vector, count: int) -> list[tuple[int, float]]:
        """Up to ``count`` ``(entry id, cosine similarity)``, most similar first."""
        if len(self) == 0:
            return []
        if self._graph is not None:
            found = self._graph.search(query, count)
            return [(int(k), 1.0 - float(d)) for k, d in zip(found.keys, found.distances, strict=True)]
        found = exact_search(self._vectors, query, min(count, len(self._keys)), MetricKind.IP, exact=True)
        return [(int(self._keys[int(row)]), 1.0 - float(d)) for row, d in zip(found.keys, found.distances, strict=True)]


class SemanticIndex:
    """A process's partitions, the entry ids it holds, and when it last caught up with Postgres.

    Thread-safe: a lock guards the partitions (searches and changes are short); catching up reads Postgres outside
    it, one thread at a time.
    """

    def __init__(self, *, hnsw_min: int, sync_ms: float = 0.0) -> None:
        self.hnsw_min = hnsw_min
        self.sync_ms = sync_ms
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._partitions: dict[str, PartitionIndex] = {}
        self._where: dict[int, str] = {}
        self.watermark = 0
        self.synced_at = float("-inf")
        self.reconciled_at = time.monotonic()

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, entry_id: int) -> bool:
        return entry_id in self._where

    def add(self, rows: Iterable[IndexedRow]) -> int:
        """Adds the rows not held yet; returns how many were new."""
        added = 0
        with self._lock:
            for row in rows:
                if row.id in self._where:
                    continue
                partition = self._partitions.get(row.index_key)
                if partition is None:
                    partition = self._partitions[row.index_key] = PartitionIndex(len(row.vector), self.hnsw_min)
                if len(row.vector) != partition.ndim:
                    continue  # a vector of another model cannot share a partition (the digest names the model)
                partition.add(row.id, row.vector)
                self._where[row.id] = row.index_key
                self.watermark = max(self.watermark, row.id)
                added += 1
        return added

    def discard(self, entry_ids: Iterable[int]) -> None:
        with self._lock:
            for entry_id in entry_ids:
                index_key = self._where.pop(entry_id, None)
                if index_key is None:
                    continue
                partition = self._partitions[index_key]
                partition.remove(entry_id)
                if len(partition) == 0:
                    del self._partitions[index_key]

    def held_ids(self) -> set[int]:
        with self._lock:
            return set(self._where)

    def search(self, index_key: str, query: Vector, count: int) -> list[tuple[int, float]]:
        with self._lock:
            partition = self._partitions.get(index_key)
            return partition.search(query, count) if partition is not None else []

    def partition_size(self, index_key: str) -> int:
        with self._lock:
            partition = self._partitions.get(index_key)
            return len(partition) if partition is not None else 0

    def sync_lock(self, *, force: bool = False) -> threading.Lock | None:
        """The sync lock, acquired, when this thread should catch up now (due: ``sync_ms`` since the last catch-up,
        and no other thread is at it);
        ``force`` waits for it whatever the time."""
        if force:
            self._sync_lock.acquire()
            return self._sync_lock
        if (time.monotonic() - self.synced_at) * 1000 < self.sync_ms:
            return None
        if not self._sync_lock.acquire(blocking=False):
            return None
        return self._sync_lock


def catch_up(
    index: SemanticIndex,
    *,
    rows: Callable[[int], Iterable[IndexedRow]],
    live_ids: Callable[[], set[int]],
    reconcile_s: float,
    force: bool = False,
) -> int:
    """Adds ``rows(watermark)`` (the rows written since the watermark, and the recent overlap) when a catch-up is due
    (``index.sync_ms`` since the last, or ``force``), and every ``reconcile_s`` drops the held ids not in
    ``live_ids()``. Returns the rows added. One thread at a time; a thread that finds another catching up goes on
    with the index as it is."""
    lock = index.sync_lock(force=force)
    if lock is None:
        return 0
    try:
        added = index.add(row for row in rows(index.watermark) if row.id not in index)
        if time.monotonic() - index.reconciled_at >= reconcile_s:
            reconcile(index, live_ids=live_ids)
        index.synced_at = time.monotonic()
        return added
    finally:
        lock.release()


def reconcile(index: SemanticIndex, *, live_ids: Callable[[], set[int]]) -> int:
    """Drops the held ids whose rows are gone (not in ``live_ids()``); returns how many."""
    dead = index.held_ids() - live_ids()
    index.discard(dead)
    index.reconciled_at = time.monotonic()
    return len(dead)


class ProcessIndex:
    """A process's one :class:`SemanticIndex`, made on first use by ``make`` (from the settings of the moment) and
    forgotten by :meth:`reset` (tests that flush the database: the next catch-up reads every row again)."""

    def __init__(self, make: Callable[[], SemanticIndex]) -> None:
        self._make = make
        self._index: SemanticIndex | None = None
        self._lock = threading.Lock()

    def get(self) -> SemanticIndex:
        with self._lock:
            if self._index is None:
                self._index = self._make()
            return self._index

    def reset(self) -> None:
        with self._lock:
            self._index = None
