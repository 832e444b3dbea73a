"""One HTTP request through an ASGI application, driven as uvicorn drives it, on a loop and thread of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Mapping[str, Any]], Awaitable[None]]], Any]


@dataclass(frozen=True)
class AsgiAnswer:
    status: int
    headers: dict[str, str]
    """By lower-case name (the last of each)."""
    cookies: list[str]
    """Every ``Set-Cookie`` header."""
    body: bytes
    loop_thread: int
    """The thread of the event loop that served the request."""


def asgi_call(
    app: ASGIApp, path: str, *, method: str = "GET", headers: list[tuple[str, str]] | None = None, body: bytes = b""
) -> AsgiAnswer:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or [])],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []

    async def call() -> int:
        requests = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if requests:
                return requests.pop()
            await asyncio.sleep(3600)  # no disconnect: the response ends on its own
            return {"type": "http.disconnect"}

        async def send(message: Mapping[str, Any]) -> None:
            sent.append(dict(message))

        await asyncio.wait_for(app(scope, receive, send), timeout=30)
        return threading.get_ident()

    with ThreadPoolExecutor(max_workers=1) as pool:
        loop_thread = pool.submit(asyncio.run, call()).result()
    start = next(m for m in sent if m["type"] == "http.response.start")
    pairs = [(k.decode().lower(), v.decode()) for k, v in start["headers"]]
    return AsgiAnswer(
        status=start["status"],
        headers=dict(pairs),
        cookies=[v for k, v in pairs if k == "set-cookie"],
        body=b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"),
        loop_thread=loop_thread,
    )
