"""What a web process must hold before it serves prompts: the tokenizers prompts are counted with. That is the
served model's (``ENGINE_MODEL``), and the copy of each ready text-generation deployment, the default's first. A
deployment registered from a store, or a new version, has a copy of its own.

:func:`web_startup` runs in the ASGI lifespan startup, before uvicorn accepts the first connection, so no
request ever races the load. When a model is not there yet it does not hold the process back (the admin,
the UI and ``/readyz`` keep working, and prompts are answered 503 with ``Retry-After``): a watcher thread
retries every ``WATCH_INTERVAL_S`` (backing off to ``WATCH_MAX_INTERVAL_S`` while loading keeps failing) and
loads the tokenizers as soon as ``prepare_model`` (or registration) has written them.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from django.db import DatabaseError, connections

from deployments.models import DeploymentKind
from deployments.selection import served_deployments
from deployments.tokenizer import ModelNotReady, load_tokenizer, serving_model_path

logger = logging.getLogger(__name__)

WATCH_INTERVAL_S = 2.0
WATCH_MAX_INTERVAL_S = 30.0

_watcher: threading.Thread | None = None
_watcher_lock = threading.Lock()


def tokenizer_paths() -> list[str]:
    """The folders whose tokenizers prompts are counted with: the served model's, then each ready text-generation
    deployment's copy, the default's first (each once). Only the first when the deployments cannot be read."""
    paths = [serving_model_path()]
    try:
        ready = [d for d in served_deployments() if d.is_ready and d.kind == DeploymentKind.GENERATE and d.local_path]
    except DatabaseError as exc:  # not migrated yet, or Postgres away: the watcher reads them again
        logger.warning("deployments not read (%s): loading the served model's tokenizer only", exc.__class__.__name__)
        return paths
    for deployment in sorted(ready, key=lambda d: not d.is_default):
        if deployment.local_path not in paths:
            paths.append(deployment.local_path)
    return paths


def load_tokenizers() -> list[ModelNotReady]:
    """Loads every tokenizer of :func:`tokenizer_paths`; returns why the ones that could not load did not (none:
    all loaded)."""
    problems: list[ModelNotReady] = []
    for path in tokenizer_paths():
        try:
            load_tokenizer(path)
        except ModelNotReady as exc:
            problems.append(exc)
    return problems


def _load_on_this_thread() -> list[ModelNotReady]:
    """:func:`load_tokenizers` on a thread of its own (the startup's, the watcher's): its database connection is
    closed at the end."""
    try:
        return load_tokenizers()
    finally:
        connections.close_all()


def _being_written(problems: list[ModelNotReady]) -> bool:
    return all("does not exist yet" in p.message or "no tokenizer files" in p.message for p in problems)


def _watch() -> None:
    interval = WATCH_INTERVAL_S
    while True:
        problems = _load_on_this_thread()
        if not problems:
            break
        threading.Event().wait(interval)
        if not _being_written(problems):
            interval = min(interval * 2, WATCH_MAX_INTERVAL_S)  # a broken model, not one being written
    logger.info("every served model's tokenizer is loaded: prompts are accepted")


def watch_until_ready() -> None:
    """Starts (once per process) the daemon thread that loads the tokenizers as soon as it can."""
    global _watcher
    with _watcher_lock:
        if _watcher is None or not _watcher.is_alive():
            _watcher = threading.Thread(target=_watch, name="tokenizer-watcher", daemon=True)
            _watcher.start()


async def web_startup() -> None:
    """Loads the tokenizers before the process serves; if a model is not ready, serves anyway and watches."""
    problems = await asyncio.to_thread(_load_on_this_thread)
    for problem in problems:
        logger.warning("%s Prompts for it are answered 503 until it is; watching for it.", problem.message)
    if problems:
        watch_until_ready()
