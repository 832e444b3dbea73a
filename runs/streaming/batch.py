"""One Redis pipeline per tick for a process's stream writes (:class:`PipelineBatcher`).

A worker has a task thread per engine slot (256 on a GPU host), and each of them flushes its run's deltas with a
pipeline of its own (``RunStreamWriter.append``): a round trip per run per flush, and every thread taking and giving
back a connection under the one pool lock. With a batcher, a thread hands its pipeline's commands to the process's
writer thread instead and waits: the writer sends everything queued since its last send in one pipeline
(``transaction=False``), then gives each caller its own replies, or its error. What a caller sees is what its own
``pipe.execute()`` would have raised or returned:

- a command that fails (a ``ResponseError``) fails only the caller that queued it;
- a pipeline that fails as a whole (Redis not answering: ``ConnectionError``, ``TimeoutError``, after redis-py's
  retries) fails every caller in it, each with its own copy of the error, and each goes on as it does without the
  batcher (the coalescer keeps its text and tries again later);
- a caller's commands go out in its order, after those it queued before (it waits for each reply).

Nothing is held back for company: the writer sends as soon as it is free, so what arrives while one pipeline is
on the wire goes out together in the next. Writes through other clients (a test's) go out in a pipeline per client.

A caller need not wait: :meth:`PipelineBatcher.submit` queues its commands and returns their :class:`Submission` at
once, to be read later (``RunStreamWriter.append_later``: a coalescer reads an append's outcome at its next flush,
so a task thread wakes once a flush, not once more for the reply).
"""

from __future__ import annotations

import copy
import os
import threading
import time
from functools import lru_cache
from typing import Any, cast

import redis

Command = tuple[tuple[Any, ...], dict[str, Any]]
"""One queued command as redis-py's ``Pipeline.command_stack`` holds it: its arguments and options."""


class Submission:
    """One caller's commands, and once sent their replies or the error: :meth:`wait` returns the replies or raises
    the error (as often as it is asked)."""

    __slots__ = ("_done", "_settled", "client", "commands", "error", "replies", "settled_at")

    def __init__(self, client: redis.Redis | None, commands: list[Command]) -> None:
        self.client = client
        """None for :meth:`settled`'s, which no writer thread sends."""
        self.commands = commands
        self.replies: list[Any] = []
        self.error: BaseException | None = None
        self._settled = False
        """The replies or the error are in (set by the writer thread, after them)."""
        self.settled_at = 0.0
        """When they came in (``time.monotonic()``)."""
        self._done = threading.Lock()
        self._done.acquire()

    @classmethod
    def settled(cls, *, replies: list[Any] | None = None, error: BaseException | None = None) -> Submission:
        """A submission already answered (commands sent without a batcher)."""
        submission = cls(None, [])
        submission.settle(replies=replies, error=error)
        return submission

    @property
    def done(self) -> bool:
        """Answered: :meth:`wait` returns (or raises) without waiting."""
        return self._settled

    def settle(self, *, replies: list[Any] | None = None, error: BaseException | None = None) -> None:
        self.replies = replies or []
        self.error = error
        self.settled_at = time.monotonic()
        self._settled = True
        self._done.release()

    def wait(self) -> list[Any]:
        if not self._settled:
            self._done.acquire()
            self._done.release()  # for a later wait
        if self.error is not None:
            raise self.error
        return self.replies


def _own_copy(error: BaseException) -> BaseException:
    """A copy of ``error`` for one of the callers it fails (the same instance raised in many threads at once would
    share one traceback), chained to the original."""
    try:
        mine = copy.copy(error)
    except Exception:  # noqa: BLE001 - an exception that cannot be copied: the original will do
        return error
    mine.__cause__ = error
    return mine


class PipelineBatcher:
    """A process's writer thread: :meth:`execute` from any thread; one pipeline per client per tick."""

    def __init__(self, *, name: str = "stream-writer") -> None:
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        self._pending: list[Submission] = []
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.pipelines = 0
        """Pipelines sent so far (one per client per tick)."""
        self.submissions = 0
        """Callers served so far."""

    def execute(self, client: redis.Redis, commands: list[Command]) -> list[Any]:
        """Sends ``commands`` (a pipeline's ``command_stack``) through ``client`` with everything else queued, and
        returns their replies; raises what ``pipe.execute()`` would (the first failed command's error, or the
        pipeline's)."""
        return self.submit(client, commands).wait()

    def submit(self, client: redis.Redis, commands: list[Command]) -> Submission:
        """Queues ``commands`` as :meth:`execute` does and returns at once; the submission's ``wait()`` gives what
        :meth:`execute` would have returned or raised."""
        if not commands:
            return Submission.settled()
        submission = Submission(client, list(commands))
        with self._cond:
            if self._thread is None or self._pid != os.getpid():  # first use, or a forked child: a thread of its own
                self._start()
            self._pending.append(submission)
            self._cond.notify()
        return submission

    def _start(self) -> None:
        self._pending = []
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch, self._pending = self._pending, []
            by_client: dict[int, list[Submission]] = {}
            for submission in batch:
                by_client.setdefault(id(submission.client), []).append(submission)
            for submissions in by_client.values():
                self._send(submissions)

    def _send(self, submissions: list[Submission]) -> None:
        """One pipeline with every submission's commands; each submission gets its own slice of the replies."""
        try:
            client = cast(redis.Redis, submissions[0].client)  # submit() queues only submissions with a client
            pipe = client.pipeline(transaction=False)
            for submission in submissions:
                pipe.command_stack.extend(submission.commands)
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - the whole pipeline failed (Redis not answering): every caller in it
            for submission in submissions:
                submission.settle(error=_own_copy(exc))
            return
        self.pipelines += 1
        self.submissions += len(submissions)
        start = 0
        for submission in submissions:
            mine = replies[start : start + len(submission.commands)]
            start += len(submission.commands)
            error = next((reply for reply in mine if isinstance(reply, redis.ResponseError)), None)
            submission.settle(replies=mine, error=error)


@lru_cache(maxsize=1)
def stream_batcher() -> PipelineBatcher:
    """The process's batcher of stream writes (its thread starts with the first write)."""
    return PipelineBatcher()
