"""Batched Postgres status reads for the streams a process follows.

A stream with nothing new in Redis (a queued run) re-reads its run's status every ``STREAMS.status_poll_s``;
with thousands of idle streams that is thousands of queries a second. Reads asked for within 10 ms of each
other go out as one ``SELECT ... WHERE id IN (...)`` on the database threads.
"""

from __future__ import annotations

import asyncio
import logging

from core.db_executor import db_read
from runs.models import Run

logger = logging.getLogger(__name__)


def _load_statuses(run_ids: list[int]) -> dict[int, str]:
    return dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "status"))


class RunStatusReader:
    """Batches the Postgres status reads of every idle stream in the process into one query."""

    def __init__(self) -> None:
        self._waiting: dict[int, list[asyncio.Future[str | None]]] = {}
        self._flusher: asyncio.Task[None] | None = None

    async def status(self, run_id: int) -> str | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str | None] = loop.create_future()
        self._waiting.setdefault(run_id, []).append(future)
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        await asyncio.sleep(0.01)
        batch, self._waiting, self._flusher = self._waiting, {}, None
        try:
            statuses = await db_read(_load_statuses, list(batch))
        except Exception as exc:  # noqa: BLE001 - the streams keep going and ask again at their next poll
            logger.warning("SSE: status read failed: %s", exc)
            for futures in batch.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
            return
        for run_id, futures in batch.items():
            for future in futures:
                if not future.done():
                    future.set_result(statuses.get(run_id))


_status_readers: dict[int, RunStatusReader] = {}


def get_status_reader() -> RunStatusReader:
    loop_id = id(asyncio.get_running_loop())
    reader = _status_readers.get(loop_id)
    if reader is None:
        _status_readers.clear()
        reader = _status_readers[loop_id] = RunStatusReader()
    return reader
