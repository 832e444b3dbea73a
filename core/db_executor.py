"""A small pool of threads for the ORM calls of async views (the run streams, the OpenAI-compatible API).

An async view that awaits Postgres through ``sync_to_async`` would hold a thread (and its connection) per
request while it waits; here every such call runs on these few threads, each keeping its connection, so a
stream holds no connection (nor thread) of its own while it waits: thousands of streams need a handful.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from django.db import InterfaceError, OperationalError, connection

logger = logging.getLogger(__name__)

T = TypeVar("T")

_db_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="async-db")

CONNECTION_ERRORS = (OperationalError, InterfaceError)
"""What Django raises when Postgres is unreachable or has dropped the connection (a restart)."""


@contextmanager
def reconnect_after_db_error() -> Iterator[None]:
    """Closes this thread's connection when the block fails on it, so the next query opens a new one.

    Django closes a broken connection only at the end of a request. A thread that is no request's (the
    dispatcher's loop, these database threads) would otherwise keep the dead one after a Postgres restart,
    and every later query would fail on it.
    """
    try:
        yield
    except CONNECTION_ERRORS:
        connection.close()
        raise


def _with_connection(fn: Callable[..., T], *args: object) -> T:
    with reconnect_after_db_error():
        return fn(*args)


def _read_with_connection(fn: Callable[..., T], *args: object) -> T:
    kept = connection.connection is not None  # opened by an earlier call on this thread
    try:
        return _with_connection(fn, *args)
    except CONNECTION_ERRORS:
        if not kept:
            raise  # a new connection failed: Postgres is down, not just restarted
        logger.info("database thread: its connection was dropped (Postgres restarted?); reading again")
    return _with_connection(fn, *args)


async def db_call(fn: Callable[..., T], *args: object) -> T:
    """Runs a synchronous ORM function on the database threads and awaits its result."""
    return await asyncio.get_running_loop().run_in_executor(_db_executor, _with_connection, fn, *args)


async def db_read(fn: Callable[..., T], *args: object) -> T:
    """:func:`db_call` for a function that only reads: when it fails on a connection the thread had kept
    (Postgres restarted since, and dropped it), it runs once more on a new one instead of failing the request."""
    return await asyncio.get_running_loop().run_in_executor(_db_executor, _read_with_connection, fn, *args)


def db_submit(fn: Callable[..., object], /, **kwargs: object) -> None:
    """Runs a synchronous ORM function on the database threads without waiting for it: for cleanup in a task
    that is being cancelled (a client that went away), where awaiting is not possible. Errors are logged."""

    def log_failure(future: Future[object]) -> None:
        exc = future.exception()
        if exc is not None:
            logger.error("background database call %s failed", getattr(fn, "__name__", fn), exc_info=exc)

    _db_executor.submit(_with_connection, functools.partial(fn, **kwargs)).add_done_callback(log_failure)
