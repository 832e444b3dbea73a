"""``GET /api/runs/{id}/stream``: the run's events over SSE (async view; serve it with uvicorn).

Owner only: the browser's session cookie or ``Authorization: Token <key>``; 401 without credentials, 404
for anyone else's run (indistinguishable from a missing one). ``Last-Event-ID`` (or ``?lastEventId=``,
for clients that cannot set headers) resumes after that event; 204 when the stream is already complete
for that id (EventSource then stops reconnecting). Closing the connection never cancels the run. A stream opened
while Postgres is unreachable (a restart) waits up to ``DB_WAIT_S`` for it, then answers 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import unquote

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django_eventstream.utils import add_default_headers

from accounts.authentication import cached_token_user, token_user
from core.db_executor import CONNECTION_ERRORS, db_read
from runs.models import Run
from runs.streaming.follow import open_run_stream
from runs.streaming.sse import iter_run_events

T = TypeVar("T")

DB_WAIT_S = 10.0
"""A stream opened while Postgres is unreachable (a restart) waits this long for it before answering 503: an SSE
client waits for events anyway, and a restart takes a second or two."""


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


async def _read(fn: Callable[..., T], *args: object) -> T:
    """``db_read``, tried again every half second for up to ``DB_WAIT_S`` while Postgres is unreachable."""
    deadline = time.monotonic() + DB_WAIT_S
    while True:
        try:
            return await db_read(fn, *args)
        except CONNECTION_ERRORS:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.5)


def _session_user(request: HttpRequest) -> AbstractBaseUser | AnonymousUser:
    user = request.user
    _ = user.is_authenticated  # evaluate the lazy user (session and user rows) on this thread
    return user


def _owned_run(run_id: int, user_id: int) -> Run | None:
    return Run.objects.filter(pk=run_id, user_id=user_id).only("id", "status").first()


async def _authenticate(request: HttpRequest) -> AbstractBaseUser | AnonymousUser | None:
    """The token's user, else the session's; None for a malformed or unknown token."""
    header = request.headers.get("Authorization", "")
    if header:
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "token" or not key.strip():
            return None
        return cached_token_user(key.strip()) or await _read(token_user, key.strip())
    return await _read(_session_user, request)


MAX_EVENT_ID = 2**63 - 1
"""The largest resume id accepted. Ids are sequence numbers (Redis ids ``0-N``); a larger one was a 500 (Redis
refuses the id as "Invalid stream ID") and is a 400 now."""


def parse_last_event_id(request: HttpRequest) -> int:
    """The client's resume point: 0 for a fresh stream. Accepts ``N`` and django-eventstream's ``run-{id}:N``.

    ``ValueError`` for anything but a whole number from 0 to ``MAX_EVENT_ID`` (ASCII digits only).
    """
    raw = request.headers.get("Last-Event-ID", "")
    if not raw:
        raw = next((value for value in reversed(request.GET.getlist("lastEventId")) if value), "")
    raw = raw.strip()
    if not raw:
        return 0
    if ":" in raw:
        raw = unquote(raw.rsplit(":", 1)[1])
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_EVENT_ID:
        raise ValueError(raw)
    return int(raw)


async def run_stream(request: HttpRequest, run_id: int) -> HttpResponseBase:
    if request.method != "GET":
        return _error(405, "method_not_allowed", "Use GET.")
    # Postgres still unreachable after DB_WAIT_S: the error goes on to core.errors.BackendOutageMiddleware (a 503).
    user = await _authenticate(request)
    if user is None:
        return _error(401, "authentication_failed", "Invalid token.")
    if not user.is_authenticated:
        return _error(401, "not_authenticated", "Log in, or send Authorization: Token <key>.")
    run = await _read(_owned_run, run_id, user.pk)
    if run is None:
        return _error(404, "not_found", "Not found.")
    try:
        after_seq = parse_last_event_id(request)
    except ValueError:
        return _error(
            400,
            "invalid_last_event_id",
            "Last-Event-ID (or ?lastEventId=) must be an event id from this stream: a whole number from 0 to "
            f"{MAX_EVENT_ID}, or run-{{id}}:N; leave it out to read the stream from the start.",
        )
    opened = await open_run_stream(run=run, after_seq=after_seq)
    if not opened.first and not opened.live:
        return HttpResponse(status=204)
    response = StreamingHttpResponse(
        iter_run_events(run_id=run.pk, after_seq=after_seq, opened=opened), content_type="text/event-stream"
    )
    add_default_headers(response, request=request)
    return response
