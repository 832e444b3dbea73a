"""``GET /v1/models``, ``POST /v1/chat/completions`` and ``POST /v1/completions``: what OpenAI clients call.

Async views (served by uvicorn like the SSE endpoint): a completion waits for its runs, so it must hold no
thread while it waits. Authentication is the user's API token as a bearer token (``OpenAI(api_key=<token>)``
sends ``Authorization: Bearer <token>``; the token comes from ``POST /api/auth/token``). The database work
runs on the SSE database threads (``core.db_executor.db_call``).

A client that disconnects before the end cancels its runs (an OpenAI call cannot be resumed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from accounts.authentication import cached_token_user, token_user
from accounts.models import User
from chats.models import Message
from core.db_executor import db_call, db_read, db_submit
from core.errors import DomainError
from deployments.selection import Served, available_models, resolve_model
from deployments.tokenizer import using_model
from openai_api import formats
from openai_api.errors import OpenAIRequestError, error_response, from_domain_error, from_request_error
from openai_api.params import StreamOptions
from openai_api.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    model_param,
    parse_chat_completion,
    parse_completion,
    read_body,
)
from openai_api.services import chat_completion_create, completion_abandon, text_completion_create
from openai_api.streaming import DONE, KEEPALIVE, Completion, collect, follow_choices
from openai_api.tools.calls import finish_reason, parse_tool_output
from openai_api.tools.parsing import ToolMode, ToolRequest
from openai_api.tools.streaming import ToolCallStream
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
    user = cached_token_user(key.strip()) or await db_read(token_user, key.strip())
    if user is None:
        return error_response("Incorrect API token.", status=401, code="invalid_api_key")
    return user


def _model_cards() -> list[dict[str, Any]]:
    """Each name with a ready version, then each ready ``name@version`` (what ``model`` may be)."""
    return [{"id": model, "object": "model", "created": 0, "owned_by": "chat-serving"} for model in available_models()]


async def _authorized(request: HttpRequest, method: str) -> User | HttpResponse:
    """The token's user, or the error to answer (wrong method, missing or unknown token)."""
    if request.method != method:
        return error_response(f"Use {method}.", status=405, code="method_not_allowed")
    return await _bearer_user(request)


async def models(request: HttpRequest) -> HttpResponse:
    user = await _authorized(request, "GET")
    if isinstance(user, HttpResponse):
        return user
    return JsonResponse({"object": "list", "data": await db_read(_model_cards)})


def _model_refused(exc: DomainError) -> JsonResponse:
    """An unknown or malformed ``model`` (404 ``model_not_found``, 400), or one with no ready worker (503)."""
    return error_response(exc.message, status=exc.status_code, code=exc.code, param="model", headers=exc.headers)


def _answer_texts(run_ids: list[int]) -> dict[int, str]:
    """The runs' assistant messages as stored in Postgres, by run id."""
    rows = Message.objects.filter(answered_by__in=run_ids).values_list("answered_by", "content")
    return {run_id: content for run_id, content in rows}


async def _stored_texts(runs: Sequence[Run], completions: Sequence[Completion]) -> list[str]:
    # The stream's text is the message; Postgres has it too, and is the record if the two ever differ.
    stored = await db_read(_answer_texts, [run.pk for run in runs])
    return [stored.get(run.pk, completion.text) for run, completion in zip(runs, completions, strict=False)]


def _failed(completions: Sequence[Completion]) -> JsonResponse | None:
    error = formats.first_error(completions)
    if error is None:
        return None
    status = 409 if error["code"] == "run_cancelled" else 502
    return error_response(error["message"], status=status, code=error["code"])


def _event_stream(body: AsyncIterator[bytes], runs: Sequence[Run]) -> StreamingHttpResponse:
    async def cancel_when_left() -> AsyncIterator[bytes]:
        finished = False
        try:
            async for part in body:
                yield part
            finished = True
        finally:
            if not finished:  # closed early: the client disconnected
                db_submit(completion_abandon, run_ids=[run.pk for run in runs])

    response = StreamingHttpResponse(cancel_when_left(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _collected(runs: Sequence[Run]) -> list[Completion]:
    try:
        return await collect(runs)
    except asyncio.CancelledError:  # the client went away (Django cancels the view on disconnect)
        db_submit(completion_abandon, run_ids=[run.pk for run in runs])
        raise


async def read_body_and_model(
    request: HttpRequest,
    *,
    resolve: Callable[[str], Served] = resolve_model,
    check: Callable[[Any], object] | None = None,
) -> tuple[Any, Served] | HttpResponse:
    """The body of a ``/v1`` POST and the deployment its ``model`` names (``resolve``: a generation model by
    default), or the error to answer: a malformed body or ``model`` (``check`` may refuse more of the body first,
    raising ``OpenAIRequestError``), then an unknown model or one with no ready worker."""
    try:
        body = read_body(request)
        model = model_param(body)
        if check is not None:
            check(body)
    except OpenAIRequestError as exc:
        return from_request_error(exc)
    try:
        return body, await db_read(resolve, model)
    except DomainError as exc:
        return _model_refused(exc)


async def _create(
    request: HttpRequest, parse: Callable[[Any], Any], create: Callable[..., list[Run]]
) -> tuple[Any, list[Run]] | HttpResponse:
    user = await _authorized(request, "POST")
    if isinstance(user, HttpResponse):
        return user
    found = await read_body_and_model(request)
    if isinstance(found, HttpResponse):
        return found
    body, served = found
    try:
        with using_model(served.local_path):  # its tokenizer checks token ids
            parsed = parse(body)
    except OpenAIRequestError as exc:
        return from_request_error(exc)
    except DomainError as exc:  # the model is still being prepared (its tokenizer checks token ids): a 503
        return from_domain_error(exc)

    def create_runs() -> list[Run]:
        with using_model(served.local_path):
            return create(user=user, request=parsed, deployment=served)

    try:
        runs = await db_call(create_runs)
    except OpenAIRequestError as exc:  # what only the user's tier can tell (service_tier, the message cap)
        return from_request_error(exc)
    except DomainError as exc:
        return from_domain_error(exc)
    return parsed, runs


# Chat -------------------------------------------------------------------------------------------------------------


CALL_MODES = (ToolMode.NAMED, ToolMode.REQUIRED, ToolMode.AUTO)


def _chat_finish(tools: ToolRequest, completion: Completion, *, called: bool) -> str | None:
    if completion.finish_reason is None:
        return None
    return finish_reason(tools.mode, completion.finish_reason, called=called)


def _answer_role(parsed: ChatCompletionRequest) -> str:
    """``assistant``; the last message's role when the answer continues it (vLLM's ``get_chat_request_role``)."""
    return parsed.last_role if parsed.continue_final else "assistant"


def _chat_message(tools: ToolRequest, text: str, role: str = "assistant") -> tuple[dict[str, Any], bool]:
    """The choice's message, and whether it holds tool calls."""
    if tools.mode in CALL_MODES:
        output = parse_tool_output(tools, text)
        if output.content is None:
            message = {"role": role, "content": None, "refusal": None, "tool_calls": output.tool_calls}
            return message, output.called
    return {"role": role, "content": text, "refusal": None}, False


@csrf_exempt  # bearer tokens only: no cookie is read, so there is no cross-site request to forge
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    created = await _create(request, parse_chat_completion, chat_completion_create)
    if isinstance(created, HttpResponse):
        return created
    parsed, runs = created
    model = formats.answered_model(parsed.model, runs)
    if parsed.stream:
        return _event_stream(_chat_chunks(runs, parsed, model=model), runs)
    completions = await _collected(runs)
    failed = _failed(completions)
    if failed is not None:
        return failed
    texts = await _stored_texts(runs, completions)
    messages = [_chat_message(parsed.tools, text, _answer_role(parsed)) for text in texts]
    return JsonResponse(
        formats.chat_body(
            runs,
            model,
            messages=[message for message, _ in messages],
            completions=completions,
            finish_reasons=[
                _chat_finish(parsed.tools, c, called=called)
                for c, (_, called) in zip(completions, messages, strict=True)
            ],
            logprobs=parsed.sampling.spec.logprobs is not None,
        )
    )


async def _chat_chunks(runs: list[Run], parsed: ChatCompletionRequest, *, model: str) -> AsyncIterator[bytes]:
    """The body of a streamed chat answer: each choice's first chunk carries its role and first token."""
    options: StreamOptions = parsed.sampling.stream
    wants_logprobs = parsed.sampling.spec.logprobs is not None
    tools = parsed.tools
    completions = [Completion() for _ in runs]
    started = [False] * len(runs)
    calls = (
        [
            ToolCallStream(
                tools.mode,
                tools.function_name,
                parallel_tool_calls=tools.parallel_tool_calls,
                names=[t["function"]["name"] for t in tools.tools],
                call_format=tools.call_format,
            )
            for _ in runs
        ]
        if tools.mode in CALL_MODES
        else None
    )

    def chunk(index: int, delta: dict[str, Any], *, logprobs: Any = None, finish: str | None = None) -> bytes:
        if not started[index]:
            delta = {"role": _answer_role(parsed), **delta}
            started[index] = True
        payload = formats.chat_chunk(runs, model, index=index, delta=delta, logprobs=logprobs, finish=finish)
        if options.continuous_usage_stats:
            payload["usage"] = formats.running_usage(completions)
        return formats.frame(payload)

    async for event in follow_choices(runs, completions):
        index = event.index
        if index < 0:
            yield KEEPALIVE
            continue
        completion = completions[index]
        if event.ended:
            if completion.error is not None:
                yield formats.error_frame(completion.error)
                return
            rest = calls[index].finish() if calls is not None else []
            if rest:
                yield chunk(index, {"tool_calls": rest})
            if not started[index]:
                yield chunk(index, {"content": ""})
            called = calls is not None and calls[index].called
            yield chunk(index, {}, finish=_chat_finish(tools, completion, called=called))
            continue
        piece = event.piece
        if piece is None:
            continue
        logprobs = formats.chat_logprobs(piece.logprobs) if wants_logprobs else None
        if calls is not None:
            delta = calls[index].delta(piece.text)
            if delta or logprobs is not None:
                yield chunk(index, delta, logprobs=logprobs)
        else:
            yield chunk(index, {"content": piece.text}, logprobs=logprobs)
    if options.include_usage:
        yield formats.frame(formats.usage_chunk(runs, model, formats.CHAT_CHUNK, formats.usage(completions)))
    yield DONE


# Text completions -------------------------------------------------------------------------------------------------


@csrf_exempt  # bearer tokens only
async def completions(request: HttpRequest) -> HttpResponseBase:
    created = await _create(request, parse_completion, text_completion_create)
    if isinstance(created, HttpResponse):
        return created
    parsed, runs = created
    model = formats.answered_model(parsed.model, runs)
    if parsed.stream:
        return _event_stream(_text_chunks(runs, parsed, model=model), runs)
    completions_ = await _collected(runs)
    failed = _failed(completions_)
    if failed is not None:
        return failed
    texts = await _stored_texts(runs, completions_)
    return JsonResponse(
        formats.text_body(
            runs,
            model,
            texts=texts,
            completions=completions_,
            logprobs=parsed.sampling.spec.logprobs is not None,
            prompts=len(parsed.prompts),
        )
    )


async def _text_chunks(runs: list[Run], parsed: CompletionRequest, *, model: str) -> AsyncIterator[bytes]:
    options = parsed.sampling.stream
    wants_logprobs = parsed.sampling.spec.logprobs is not None
    prompts = len(parsed.prompts)
    completions_ = [Completion() for _ in runs]
    offsets = [0] * len(runs)

    def frame(payload: dict[str, Any]) -> bytes:
        if options.continuous_usage_stats:
            payload["usage"] = formats.running_usage(completions_, prompts=prompts)
        return formats.frame(payload)

    async for event in follow_choices(runs, completions_):
        index = event.index
        if index < 0:
            yield KEEPALIVE
            continue
        completion = completions_[index]
        if event.ended:
            if completion.error is not None:
                yield formats.error_frame(completion.error)
                return
            yield frame(
                formats.text_chunk(
                    runs, model, index=index, piece=None, offset=0, logprobs=False, finish=completion.finish_reason
                )
            )
            continue
        piece = event.piece
        if piece is None:
            continue
        yield frame(
            formats.text_chunk(
                runs, model, index=index, piece=piece, offset=offsets[index], logprobs=wants_logprobs, finish=None
            )
        )
        offsets[index] += len(piece.text)
    if options.include_usage:
        yield formats.frame(
            formats.usage_chunk(runs, model, formats.TEXT, formats.usage(completions_, prompts=prompts))
        )
    yield DONE
