"""What a web process must hold before it serves prompts: the served model's tokenizer.

:func:`web_startup` runs in the ASGI lifespan startup, before uvicorn accepts the first connection, so no
request ever races the load. When the model is not there yet it does not hold the process back (the admin,
the UI and ``/readyz`` keep working, and prompts are answered 503 with ``Retry-After``): a watcher thread
retries every ``WATCH_INTERVAL_S`` (backing off to ``WATCH_MAX_INTERVAL_S`` while loading keeps failing) and
loads the tokenizer as soon as ``prepare_model`` has written it.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from django.conf import settings

from deployments.tokenizer import ModelNotReady, get_tokenizer

logger = logging.getLogger(__name__)

WATCH_INTERVAL_S = 2.0
WATCH_MAX_INTERVAL_S = 30.0

_watcher: threading.Thread | None = None
_watcher_lock = threading.Lock()


def _watch() -> None:
    interval = WATCH_INTERVAL_S
    while True:
        try:
            get_tokenizer()
        except ModelNotReady as exc:
            threading.Event().wait(interval)
            if "does not exist yet" not in exc.message and "no tokenizer files" not in exc.message:
                interval = min(interval * 2, WATCH_MAX_INTERVAL_S)  # a broken model, not one being written
            continue
        logger.info("model %s is ready: prompts are accepted", settings.ENGINE.served_model_name)
        return


def watch_until_ready() -> None:
    """Starts (once per process) the daemon thread that loads the tokenizer as soon as it can."""
    global _watcher
    with _watcher_lock:
        if _watcher is None or not _watcher.is_alive():
            _watcher = threading.Thread(target=_watch, name="tokenizer-watcher", daemon=True)
            _watcher.start()


async def web_startup() -> None:
    """Loads the tokenizer before the process serves; if the model is not ready, serves anyway and watches."""
    try:
        await asyncio.to_thread(get_tokenizer)
    except ModelNotReady as exc:
        logger.warning("%s Prompts are answered 503 until it is; watching for it.", exc.message)
        watch_until_ready()
