"""One engine per worker process, owned by a long-lived asyncio loop in a background thread.

Celery task threads never run an event loop of their own: they submit coroutines to the host's loop with
``asyncio.run_coroutine_threadsafe`` and read the deltas from a thread-safe queue, so every task thread
feeds the same engine and concurrent runs share its continuous batches.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Coroutine, Generator, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

from core.config import EngineConfig
from inference_workers.engine import build_engine
from inference_workers.engine.base import (
    EngineDead,
    EngineError,
    EngineStats,
    GenerationDelta,
    GenerationRequest,
    InferenceEngine,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

_END = object()


class EngineHost:
    def __init__(self, config: EngineConfig, engine: InferenceEngine | None = None) -> None:
        self.config = config
        self.engine: InferenceEngine = engine or build_engine(config)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="engine-loop", daemon=True)
        self._started = False
        self.dead: str | None = None
        """Why the engine died (None while it lives); once set, every :meth:`stream` raises :class:`EngineDead`."""
        self.on_dead: Callable[[str], None] | None = None
        """Called once, from the engine's loop thread, when the engine dies (the worker runtime stops the process)."""
        self._dead_lock = threading.Lock()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self, timeout: float | None = None) -> None:
        """Starts the loop thread and builds the engine on it; blocks until the engine is ready."""
        if self._started:
            return
        self._thread.start()
        self.submit(self.engine.start()).result(timeout)
        self._started = True
        logger.info("engine ready: %s (%s slots)", self.engine.model_name, self.engine.max_num_seqs)

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stream(
        self,
        request: GenerationRequest,
        *,
        poll_s: Callable[[], float] | None = None,
        hold_s: Callable[[], float] | None = None,
    ) -> Iterator[GenerationDelta | None]:
        """:meth:`stream_batches` one delta at a time: each delta of a batch, or ``None`` when a wait passed idle.
        Abandoning the iterator aborts the request."""
        batches = self.stream_batches(request, poll_s=poll_s, hold_s=hold_s)
        try:
            for batch in batches:
                if batch is None:
                    yield None
                else:
                    yield from batch
        finally:
            batches.close()

    def stream_batches(
        self,
        request: GenerationRequest,
        *,
        poll_s: Callable[[], float] | None = None,
        hold_s: Callable[[], float] | None = None,
    ) -> Generator[list[GenerationDelta] | None, None, None]:
        """Deltas of one request for a synchronous caller, in batches: every delta that arrived while the caller
        waited, in order, at once. Yields ``None`` whenever the wait ``poll_s()`` (asked before each wait, so a caller
        with nothing buffered can sleep longer) passes idle; None: never.

        ``hold_s()``, asked when a delta arrives after a wait, is how long the caller is content to leave the next
        ones waiting (its coalescer's time to the next flush; 0: hand it over now, a first token say): the thread
        sleeps that long, or until the request ends or fails, and then takes every delta that arrived meanwhile as
        one batch. The end is never held: a short answer's last tokens, and its run's end, do not wait out a flush
        interval (up to ``STREAM_MAX_FLUSH_INTERVAL_S`` under load) after the engine is done. A task thread then
        wakes once per flush, not once per token: at GPU speeds, a wake-up per token per run (a futex, the GIL) was
        the largest part of a worker's CPU per token (``bench/serving_ceiling.py``). A caller that writes a batch at
        once (not delta by delta) sends every delta it was held for in one flush.

        Raises :class:`EngineError` if the request fails, :class:`EngineDead` (an ``EngineError`` too) if the engine is
        dead (or dies meanwhile). Abandoning the iterator aborts the request.
        """
        if self.dead is not None:
            raise EngineDead(self.dead)
        out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        ended = threading.Event()
        """Set with the last delta, an error or the end: a hold ends then, so the end is never held."""

        async def pump() -> None:
            try:
                async for delta in self.engine.generate(request):
                    out.put(delta)
                    if delta.finished:
                        ended.set()
            except asyncio.CancelledError:
                out.put(EngineError("generation was cancelled"))
                raise
            except EngineDead as exc:  # every request fails from now on: the worker must stop taking runs
                logger.critical("the engine died (request %s): %s", request.request_id, exc)
                self._mark_dead(str(exc))
                out.put(EngineDead(str(exc)))  # raised in the task thread, which reads the queue
            except Exception as exc:  # any other engine failure ends this run, not the worker
                logger.exception("engine failed on request %s", request.request_id)
                out.put(EngineError(f"{type(exc).__name__}: {exc}"))
            finally:
                out.put(_END)
                ended.set()

        def take_waiting(into: list[Any]) -> None:
            while True:
                try:
                    into.append(out.get_nowait())
                except queue.Empty:
                    return

        future = self.submit(pump())
        try:
            while True:
                taken: list[Any] = []
                try:
                    taken.append(out.get(timeout=poll_s() if poll_s is not None else None))
                except queue.Empty:
                    yield None
                    continue
                first = taken[0]
                held = hold_s() if hold_s is not None else 0.0
                if held > 0 and isinstance(first, GenerationDelta) and not first.finished:  # else nothing follows
                    ended.wait(held)  # the run's end (or an error) cuts the hold short
                take_waiting(taken)
                deltas: list[GenerationDelta] = []
                for item in taken:
                    if isinstance(item, GenerationDelta):
                        deltas.append(item)
                        continue
                    if deltas:  # what came before the end or the error
                        yield deltas
                    if isinstance(item, EngineError):
                        raise item
                    return  # _END
                yield deltas
        finally:
            if not future.done():
                # The caller stopped early (an exception in the task thread): free the engine slot.
                self.abort(request.request_id)
                future.cancel()

    def _mark_dead(self, reason: str) -> None:
        with self._dead_lock:
            if self.dead is not None:
                return
            self.dead = reason
        if self.on_dead is not None:
            try:
                self.on_dead(reason)
            except Exception:
                logger.exception("the engine-death handler failed")

    def abort(self, request_id: str) -> None:
        """Thread-safe; returns at once (the abort lands within one engine step)."""
        if self._started:
            self.submit(self.engine.abort(request_id))

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def shutdown(self, timeout: float = 30.0) -> None:
        if not self._started:
            return
        try:
            self.submit(self.engine.shutdown()).result(timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
            self._started = False
