"""The ASGI route of ``GET /api/runs/{id}/stream``: Django's own request handling, minus a thread per stream.

Django's ``ASGIHandler`` opens a ``ThreadSensitiveContext`` per request, and the (synchronous) middleware
then runs on a thread that belongs to that request until its response ends: for an SSE stream that is one
idle thread per connected client, 2,000 threads for 2,000 streams. This handler is the same handler
without that context, so the middleware's short steps share asgiref's one thread-sensitive thread; the
stream's own database reads run on :mod:`core.db_executor` threads. Same URL resolution, middleware,
view and responses as every other path.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.core.handlers.asgi import ASGIHandler

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Long-lived responses: the run streams and the OpenAI-compatible completions (which wait for their run).
STREAM_PATH = re.compile(r"^(/api/runs/\d+/stream|/v1/chat/completions|/v1/completions)$")


class StreamASGIHandler(ASGIHandler):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)


def with_stream_route(app: ASGIApp) -> ASGIApp:
    """``app`` for every path but the run streams, which go to :class:`StreamASGIHandler`."""
    streams = StreamASGIHandler()

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and STREAM_PATH.match(scope["path"]):
            await streams(scope, receive, send)
        else:
            await app(scope, receive, send)

    return application
