"""``POST /v1/responses``, ``GET``/``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``.

Async views with the chat completions' authentication, model resolution and error shapes (``openai_api.apis``);
a response is one run, streamed from its Redis stream or collected, and a client that goes away before the end
cancels it (as a chat completion's). A stored response is the caller's own: any other id is a 404.
"""

from __future__ import annotations

from functools import partial

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from accounts.models import User
from core.db_executor import db_call, db_read
from core.errors import DomainError
from deployments.tokenizer import using_model
from openai_api.apis import _authorized, _bearer_user, _collected, _event_stream, read_body_and_model
from openai_api.errors import OpenAIRequestError, error_response, from_domain_error, from_request_error
from openai_api.responses import formats
from openai_api.responses.models import ResponseRecord
from openai_api.responses.requests import PreviousOutput, parse_response_create, previous_response_param
from openai_api.responses.selectors import response_record_get, response_record_reload
from openai_api.responses.services import response_create, response_delete
from openai_api.responses.streaming import response_events
from runs.models import RunStatus


def _not_found(public_id: str, *, param: str | None = None, previous: bool = False) -> JsonResponse:
    what = "Previous response" if previous else "Response"
    return error_response(
        f"{what} with id '{public_id[:80]}' not found.",
        status=404,
        code="previous_response_not_found" if previous else "response_not_found",
        param=param,
    )


def _previous_output(record: ResponseRecord) -> PreviousOutput:
    run = record.run
    text = run.assistant_message.content if run.assistant_message is not None else ""
    calls = formats.calls_of(record, text)
    return PreviousOutput(
        text=text,
        calls=[(formats.call_id(record, i), call.name, call.arguments) for i, call in enumerate(calls)],
    )


async def _previous(user: User, public_id: str | None) -> ResponseRecord | HttpResponse | None:
    if public_id is None:
        return None
    record = await db_read(partial(response_record_get, user=user, public_id=public_id))
    if record is None:
        return _not_found(public_id, param="previous_response_id", previous=True)
    if record.run.status != RunStatus.DONE:
        return error_response(
            f"Previous response '{public_id[:80]}' is {formats.response_status(record.run)}: only a completed "
            "response can be continued.",
            status=400,
            code="previous_response_not_completed",
            param="previous_response_id",
        )
    return record


async def _create(request: HttpRequest, user: User) -> HttpResponseBase:
    found = await read_body_and_model(request, check=previous_response_param)
    if isinstance(found, HttpResponse):
        return found
    body, served = found
    previous = await _previous(user, previous_response_param(body))
    if isinstance(previous, HttpResponse):
        return previous
    try:
        with using_model(served.local_path):
            parsed = parse_response_create(body, previous=_previous_output(previous) if previous else None)
    except OpenAIRequestError as exc:
        return from_request_error(exc)
    except DomainError as exc:
        return from_domain_error(exc)

    def create() -> ResponseRecord:
        with using_model(served.local_path):
            return response_create(user=user, request=parsed, deployment=served, previous=previous)

    try:
        record = await db_call(create)
    except DomainError as exc:
        return from_domain_error(exc)
    reload = partial(db_read, partial(response_record_reload, record_id=record.pk))
    if parsed.stream:
        return _event_stream(response_events(record, reload=reload), [record.run])
    await _collected([record.run])
    final = await reload()
    return JsonResponse(formats.response_object(final, final.run))


@csrf_exempt  # bearer tokens only: no cookie is read, so there is no cross-site request to forge
async def responses(request: HttpRequest) -> HttpResponseBase:
    user = await _authorized(request, "POST")
    if isinstance(user, HttpResponse):
        return user
    return await _create(request, user)


@csrf_exempt  # bearer tokens only
async def response_detail(request: HttpRequest, public_id: str) -> HttpResponseBase:
    if request.method not in ("GET", "DELETE"):
        return error_response("Use GET or DELETE.", status=405, code="method_not_allowed")
    user = await _bearer_user(request)
    if isinstance(user, HttpResponse):
        return user
    record = await db_read(partial(response_record_get, user=user, public_id=public_id))
    if record is None:
        return _not_found(public_id)
    if request.method == "DELETE":
        await db_call(partial(response_delete, record=record))
        return JsonResponse({"id": record.public_id, "object": "response.deleted", "deleted": True})
    return JsonResponse(formats.response_object(record, record.run))


async def response_input_items(request: HttpRequest, public_id: str) -> HttpResponseBase:
    user = await _authorized(request, "GET")
    if isinstance(user, HttpResponse):
        return user
    record = await db_read(partial(response_record_get, user=user, public_id=public_id))
    if record is None:
        return _not_found(public_id)
    order = request.GET.get("order", "desc")
    if order not in ("asc", "desc"):
        return error_response("'order' must be 'asc' or 'desc'.", status=400, param="order")
    items = list(record.input_items if order == "asc" else reversed(record.input_items))
    return JsonResponse(
        {
            "object": "list",
            "data": items,
            "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None,
            "has_more": False,
        }
    )
