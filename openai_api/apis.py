"""``GET /v1/models`` and ``POST /v1/chat/completions``: what the official OpenAI clients call.

Async views (served by uvicorn like the SSE endpoint): a completion waits for its run, so it must hold no
thread while it waits. Authentication is the user's API token as a bearer token (``OpenAI(api_key=<token>)``
sends ``Authorization: Bearer <token>``; the token comes from ``POST /api/auth/token``). The database work
runs on the SSE database threads (``core.db_executor.db_call``).

A client that disconnects before the end cancels its run (an OpenAI call cannot be resumed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from accounts.models import User
from accounts.selectors import user_for_token
from chats.models import Message
from core.db_executor import db_call, db_read, db_submit
from core.errors import DomainError
from core.text import echo
from openai_api.errors import OpenAIRequestError, error_response, from_domain_error, from_request_error
from openai_api.requests import ChatCompletionRequest, parse_chat_completion, read_body
from openai_api.services import completion_abandon, completion_create
from openai_api.streaming import collect, completion_body, sse_chunks
from runs.models import Run

logger = logging.getLogger(__name__)


async def _bearer_user(request: HttpRequest) -> User | HttpResponse:
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return error_response(
            "Send your API token as 'Authorization: Bearer <token>' (get one from POST /api/auth/token).",
            status=401,
            code="missing_api_key",
        )
    user = await db_read(user_for_token, key.strip())
    if user is None:
        return error_response("Incorrect API token.", status=401, code="invalid_api_key")
    return user


def _model_card() -> dict[str, Any]:
    return {"id": settings.ENGINE.served_model_name, "object": "model", "created": 0, "owned_by": "chat-serving"}


async def _authorized(request: HttpRequest, method: str) -> User | HttpResponse:
    """The token's user, or the error to answer (wrong method, missing or unknown token)."""
    if request.method != method:
        return error_response(f"Use {method}.", status=405, code="method_not_allowed")
    return await _bearer_user(request)


async def models(request: HttpRequest) -> HttpResponse:
    user = await _authorized(request, "GET")
    if isinstance(user, HttpResponse):
        return user
    return JsonResponse({"object": "list", "data": [_model_card()]})


def _answer_text(run_id: int) -> str | None:
    """The run's assistant message as stored in Postgres."""
    return Message.objects.filter(answered_by=run_id).values_list("content", flat=True).first()


@csrf_exempt  # bearer tokens only: no cookie is read, so there is no cross-site request to forge
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    user = await _authorized(request, "POST")
    if isinstance(user, HttpResponse):
        return user
    try:
        parsed = parse_chat_completion(read_body(request))
    except OpenAIRequestError as exc:
        return from_request_error(exc)
    served = settings.ENGINE.served_model_name
    if parsed.model != served:
        return error_response(
            f"The model '{echo(parsed.model)}' does not exist here; this server serves '{served}'.",
            status=404,
            code="model_not_found",
            param="model",
        )
    try:
        run = await db_call(_create, user, parsed)
    except DomainError as exc:
        return from_domain_error(exc)
    if parsed.stream:
        response = StreamingHttpResponse(
            _stream_or_cancel(run, model=served, include_usage=parsed.include_usage),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    try:
        completion = await collect(run)
    except asyncio.CancelledError:  # the client went away (Django cancels the view on disconnect)
        db_submit(completion_abandon, run_id=run.pk)
        raise
    if completion.error is not None:
        status = 409 if completion.error["code"] == "run_cancelled" else 502
        return error_response(completion.error["message"], status=status, code=completion.error["code"])
    # The stream's text is the message; Postgres has it too, and is the record if the two ever differ.
    content = await db_read(_answer_text, run.pk)
    body_out = completion_body(
        run, model=served, content=completion.text if content is None else content, completion=completion
    )
    return JsonResponse(body_out)


def _create(user: User, parsed: ChatCompletionRequest) -> Run:
    return completion_create(user=user, request=parsed)


async def _stream_or_cancel(run: Run, *, model: str, include_usage: bool) -> AsyncIterator[bytes]:
    finished = False
    try:
        async for part in sse_chunks(run, model=model, include_usage=include_usage):
            yield part
        finished = True
    finally:
        if not finished:  # closed early: the client disconnected
            db_submit(completion_abandon, run_id=run.pk)
