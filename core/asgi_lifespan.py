"""The ASGI lifespan protocol around an app that does not speak it (Django's handler refuses the scope).

uvicorn sends ``lifespan.startup`` before it accepts connections and waits for ``startup.complete``: work done
there (loading a tokenizer) is finished before the first request. A startup that raises is reported as
``startup.failed`` and uvicorn exits instead of serving a half-ready process.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def with_lifespan(app: ASGIApp, *, startup: Sequence[Callable[[], Awaitable[None]]]) -> ASGIApp:
    """``app`` for HTTP, with each ``startup`` step awaited in order on ``lifespan.startup``."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    for step in startup:
                        await step()
                except Exception as exc:
                    logger.exception("startup failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    return application
