"""Request ids: every HTTP response carries ``X-Request-ID``, and every line logged while serving it repeats it.

A proxy or client that already sent a sane ``X-Request-ID`` (``REQUEST_ID_PATTERN``) keeps its id, so its
own logs and ours join up; anything else (missing, too long, odd characters that could forge log content)
is replaced by a fresh one. The id lives in a ``ContextVar`` that ``core.logs.RequestIdFilter`` reads.

The middleware is async-capable because the run streams and ``/v1`` are async views served by uvicorn:
under ASGI each request runs in its own task, so the id set here is still current while Django sends a
streaming response's body, after the middleware has returned, and it ends with that task. In sync mode
(WSGI, the test client) the thread outlives the request, so the id is reset when the middleware returns.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest
from django.http.response import HttpResponseBase

REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""An incoming id is reused only if it is 1 to 128 of these characters (UUIDs, hex, proxy-style ids)."""

_request_id: ContextVar[str] = ContextVar("request_id", default="")


def current_request_id() -> str:
    """The id of the HTTP request being served in this context; empty outside a request."""
    return _request_id.get()


@contextmanager
def request_id_scope(request_id: str) -> Iterator[None]:
    """``request_id`` is current inside the block (and the previous one again after it)."""
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        _request_id.reset(token)


def new_request_id() -> str:
    return uuid.uuid4().hex


def request_id_for(incoming: str | None) -> str:
    """``incoming`` when it is a sane id (``REQUEST_ID_PATTERN``), else a new one."""
    if incoming and REQUEST_ID_PATTERN.fullmatch(incoming):
        return incoming
    return new_request_id()


class RequestIdMiddleware:
    """Sets the request's id for its logs and answers it in ``X-Request-ID``; first in ``MIDDLEWARE``, so the
    other middleware's log lines (and the error responses they build) have it too."""

    sync_capable = True
    async_capable = True

    def __init__(
        self,
        get_response: Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]],
    ) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self._acall(request)
        request_id = request_id_for(request.headers.get(REQUEST_ID_HEADER))
        with request_id_scope(request_id):
            response = cast(HttpResponseBase, self.get_response(request))  # sync mode: a sync get_response
        response[REQUEST_ID_HEADER] = request_id
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        request_id = request_id_for(request.headers.get(REQUEST_ID_HEADER))
        _request_id.set(request_id)  # not reset: the streamed body is sent after we return (module docstring)
        response = await cast(Awaitable[HttpResponseBase], self.get_response(request))  # async get_response
        response[REQUEST_ID_HEADER] = request_id
        return response
