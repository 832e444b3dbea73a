"""The ASGI route of ``GET /api/runs/{id}/stream``: Django's own request handling, minus a thread per stream.

Django's ``ASGIHandler`` opens a ``ThreadSensitiveContext`` per request, and the (synchronous) middleware
then runs on a thread that belongs to that request until its response ends: for an SSE stream that is one
idle thread per connected client, 2,000 threads for 2,000 streams. This handler is the same handler
without that context, so the middleware's short steps share asgiref's one thread-sensitive thread; the
stream's own database reads run on :mod:`core.db_executor` threads. Same URL resolution, middleware,
view and responses as every other path.

Which paths take this route is the caller's to say (:func:`with_stream_route`'s ``paths``): the run streams'
(:data:`RUN_STREAM_PATH`) and those of any app whose responses wait as long (the wiring, ``chatproject/asgi.py``,
adds the OpenAI-compatible completions).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from core.asgi_body import WholeBodyASGIHandler

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

RUN_STREAM_PATH = r"/api/runs/\d+/stream"
"""``GET /api/runs/{id}/stream`` (``run-stream`` in ``chatproject/urls.py``), as a regular expression of the path."""


class StreamASGIHandler(WholeBodyASGIHandler):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)


def with_stream_route(app: ASGIApp, *, paths: Iterable[str]) -> ASGIApp:
    """``app`` for every path but the long-lived responses, which go to :class:`StreamASGIHandler`.

    ``paths``: regular expressions, each of a whole request path (:data:`RUN_STREAM_PATH`...). They are joined
    into one pattern here, once, so a request costs one match whatever the number of paths.
    """
    streams = StreamASGIHandler()
    is_stream = re.compile(rf"^({'|'.join(paths)})$").match

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_stream(scope["path"]):
            await streams(scope, receive, send)
        else:
            await app(scope, receive, send)

    return application
