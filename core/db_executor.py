"""A small pool of threads for the ORM calls of async views (the run streams, the OpenAI-compatible API).

An async view that awaits Postgres through ``sync_to_async`` would hold a thread (and its connection) per
request while it waits; here every such call runs on these few threads, each keeping its connection, so a
stream holds no connection (nor thread) of its own while it waits: thousands of streams need a handful.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from django.db import InterfaceError, OperationalError, connection

logger = logging.getLogger(__name__)

T = TypeVar("T")

_db_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="async-db")


def _with_connection(fn: Callable[..., T], *args: object) -> T:
    try:
        return fn(*args)
    except (OperationalError, InterfaceError):
        connection.close()  # broken (Postgres restarted?): the next call opens a new one
        raise


async def db_call(fn: Callable[..., T], *args: object) -> T:
    """Runs a synchronous ORM function on the database threads and awaits its result."""
    return await asyncio.get_running_loop().run_in_executor(_db_executor, _with_connection, fn, *args)


def db_submit(fn: Callable[..., object], /, **kwargs: object) -> None:
    """Runs a synchronous ORM function on the database threads without waiting for it: for cleanup in a task
    that is being cancelled (a client that went away), where awaiting is not possible. Errors are logged."""

    def log_failure(future: Future[object]) -> None:
        exc = future.exception()
        if exc is not None:
            logger.error("background database call %s failed", getattr(fn, "__name__", fn), exc_info=exc)

    _db_executor.submit(_with_connection, functools.partial(fn, **kwargs)).add_done_callback(log_failure)
