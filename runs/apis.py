"""Run endpoints, and the endpoints of one chat: they show its active run, post prompts (new runs) and cancel
its runs on delete. Thin: validate, call one service or selector, serialize."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import request_user
from chats import selectors as chat_selectors
from chats import services as chat_services
from chats.context import chat_system_prompt
from chats.serializers import ChatOutSerializer, ChatUpdateSerializer, MessageCreateSerializer, MessageOutSerializer
from core.errors import error_response
from core.http.pagination import BAD_PAGE, PAGE_PARAMS, keyset_paginate, page_response, parse_limit
from deployments.selection import resolve_model
from runs import revisions, selectors, services
from runs.models import Run
from runs.quota import quota_usage
from runs.serializers import ChatDetailOutSerializer, MessageListOutSerializer, RunOutSerializer

NOT_FOUND = {404: error_response("No such run, or it belongs to another user.")}
CHAT_NOT_FOUND = {404: error_response("No such chat, or it belongs to another user.")}
INVALID = {400: error_response("Invalid body: says which field is wrong and why.")}


def run_data(run: Run) -> dict[str, object]:
    """One run as the API shows it (its queue position read in one batched selector)."""
    return dict(RunOutSerializer(run, context={"positions": selectors.run_queue_positions(runs=[run])}).data)


class RunDetailApi(APIView):
    @extend_schema(responses={200: RunOutSerializer, **NOT_FOUND})
    def get(self, request: Request, run_id: int) -> Response:
        run = selectors.run_get(user=request_user(request), run_id=run_id)
        return Response(run_data(run))


class RunCancelApi(APIView):
    @extend_schema(
        request=None,
        responses={200: RunOutSerializer, **NOT_FOUND},
        description="A queued run ends `cancelled` at once; a streaming one goes to `cancelling` until the worker "
        "has aborted it. Idempotent: a finished run is returned as it is.",
    )
    def post(self, request: Request, run_id: int) -> Response:
        user = request_user(request)
        run = services.run_cancel(run=selectors.run_get(user=user, run_id=run_id))
        return Response(run_data(selectors.run_get(user=user, run_id=run.pk)))


class ChatDetailApi(APIView):
    @extend_schema(
        operation_id="chats_retrieve",
        responses={200: ChatDetailOutSerializer, **CHAT_NOT_FOUND},
        description="The chat, with `active_run`: its queued or streaming run (null when none) to resume.",
    )
    def get(self, request: Request, chat_id: int) -> Response:
        chat = chat_selectors.chat_get(user=request_user(request), chat_id=chat_id)
        active = selectors.run_active_for_chat(chat=chat)
        context = {"active_run": active, "positions": selectors.run_queue_positions(runs=[active])}
        return Response(ChatDetailOutSerializer(chat, context=context).data)

    @extend_schema(
        operation_id="chats_partial_update",
        request=ChatUpdateSerializer,
        responses={200: ChatOutSerializer, **INVALID, **CHAT_NOT_FOUND},
        description="Renames the chat, changes its `model` (404 `model_not_found` for one not served) and/or "
        'the settings of its later runs: `system_prompt` (up to 4000 characters; `""`: the server\'s default) '
        "and `temperature` (0..2; null: the default, used when a prompt names none). "
        "A partial update: a field left out keeps its value (an empty body "
        "changes nothing); an unknown field is a 400.",
    )
    def patch(self, request: Request, chat_id: int) -> Response:
        chat = chat_selectors.chat_get(user=request_user(request), chat_id=chat_id)
        body = ChatUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data:
            chat = chat_services.chat_update(
                chat=chat,
                title=data.get("title"),
                model=data.get("model"),
                system_prompt=data.get("system_prompt"),
                temperature=data["temperature"] if "temperature" in data else chat_services.UNSET,
            )
        return Response(ChatOutSerializer(chat).data)

    @extend_schema(
        operation_id="chats_destroy",
        responses={204: None, **CHAT_NOT_FOUND},
        description="Deletes the chat with its messages and runs; an unfinished run is cancelled first.",
    )
    def delete(self, request: Request, chat_id: int) -> Response:
        chat = chat_selectors.chat_get(user=request_user(request), chat_id=chat_id)
        services.chat_delete(chat=chat)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ChatMessagesApi(APIView):
    @extend_schema(
        operation_id="chats_messages_list",
        parameters=PAGE_PARAMS,
        responses={200: page_response("MessagePage", MessageListOutSerializer), **BAD_PAGE, **CHAT_NOT_FOUND},
        description="The chat's current messages, newest first (descending `created_at`, then id); follow "
        "`next_cursor` to page towards older messages. Messages added while paging never shift the later pages. "
        "An answer carries its `run`, `finish_reason`, `feedback` and `versions` (its earlier versions, "
        "regenerated or continued, oldest first; they are not in the list themselves).",
    )
    def get(self, request: Request, chat_id: int) -> Response:
        chat = chat_selectors.chat_get(user=request_user(request), chat_id=chat_id)
        page = keyset_paginate(
            chat_selectors.message_list(chat=chat),
            time_field="created_at",
            cursor=request.query_params.get("cursor"),
            limit=parse_limit(request.query_params.get("limit")),
        )
        context = {"answers": selectors.message_answers(messages=page.items)}
        shown = MessageListOutSerializer(page.items, many=True, context=context).data
        return Response({"results": shown, "next_cursor": page.next_cursor})

    @extend_schema(
        operation_id="chats_messages_create",
        request=MessageCreateSerializer,
        responses={
            202: inline_serializer(
                name="PromptAccepted",
                fields={
                    "run": RunOutSerializer(),
                    "message": MessageOutSerializer(),
                    "stream_url": serializers.CharField(help_text="SSE endpoint of the run's tokens."),
                },
            ),
            **INVALID,
            **CHAT_NOT_FOUND,
            409: error_response("The chat already has a run that has not ended."),
            429: error_response("A rate or concurrency limit was hit; retry after the Retry-After header."),
            503: error_response("The model has no ready worker (or is being prepared); retry after Retry-After."),
        },
        description="Posts a prompt: stores the user message and a queued run in one transaction and answers "
        "202 at once; the answer streams from `stream_url`. `model` (else the chat's) picks the deployment: an "
        "unknown one is a 404 `model_not_found` naming those there are.",
    )
    def post(self, request: Request, chat_id: int) -> Response:
        # The chat's ownership is checked (404) by run_create, in the statement that writes the prompt, after the
        # checks that need no database (400, the tier's caps, 429). Only its model (and its system prompt, for the
        # fit check) is read here, when the body names none (another user's chat has none to read, and is then a
        # 404 all the same); a prompt that names its model is fit-checked with the default system prompt.
        body = MessageCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        user = request_user(request)
        asked = data.get("model")
        system_prompt = None
        known: services.ChatTemperature | None = None
        if asked is None:
            found = chat_selectors.chat_model(user=user, chat_id=chat_id)
            spec, system_prompt = (found[0], chat_system_prompt(chat_prompt=found[1])) if found else (None, None)
            known = services.ChatTemperature(found[2]) if found else services.ChatTemperature(None, exists=False)
        else:
            spec = asked
        deployment = resolve_model(spec)
        run = services.run_create(
            chat_id=chat_id,
            user=user,
            content=data["content"],
            sampling=services.SamplingRequest(
                max_tokens=data.get("max_tokens"),
                spec=data["spec"],
                temperature_from_chat=data["temperature_from_chat"],
            ),
            system_prompt=system_prompt,
            deployment=deployment,
            chat_model=asked.strip() if asked is not None else None,
            chat_temperature=known,
        )
        shown = run_data(run)
        return Response(
            {
                "run": shown,
                "message": MessageOutSerializer(run.user_message).data,
                "stream_url": shown["stream_url"],
            },
            status=status.HTTP_202_ACCEPTED,
        )


REVISION_RESPONSES = {
    **CHAT_NOT_FOUND,
    429: error_response("A rate or concurrency limit was hit; retry after the Retry-After header."),
    503: error_response("The model has no ready worker (or is being prepared); retry after Retry-After."),
}


class ChatRegenerateApi(APIView):
    @extend_schema(
        operation_id="chats_regenerate",
        request=None,
        responses={
            201: RunOutSerializer,
            409: error_response("A run of the chat is in flight, or it has no prompt to answer."),
            **REVISION_RESPONSES,
        },
        description="A new run answering the chat's last prompt again (its `stream_url` streams the new answer). "
        "The answer it replaces stays: once the new one is stored it is listed in that answer's `versions`, and "
        "only the current version is in later prompts. Same sampling as the answer it replaces, without its seed "
        "(the chat's `temperature` setting when it has one).",
    )
    def post(self, request: Request, chat_id: int) -> Response:
        run = revisions.run_regenerate(chat_id=chat_id, user=request_user(request))
        return Response(run_data(run), status=status.HTTP_201_CREATED)


class ChatContinueApi(APIView):
    @extend_schema(
        operation_id="chats_continue",
        request=None,
        responses={
            201: RunOutSerializer,
            409: error_response("A run is in flight, or the last answer did not stop short (`not_continuable`)."),
            **REVISION_RESPONSES,
        },
        description="A new run that goes on from the chat's last answer when it stopped short (cancelled, or "
        "`finish_reason` `length`): its stream carries only the added text; the stored answer is the old text "
        "followed by it (the stopped one stays as an earlier version).",
    )
    def post(self, request: Request, chat_id: int) -> Response:
        run = revisions.run_continue(chat_id=chat_id, user=request_user(request))
        return Response(run_data(run), status=status.HTTP_201_CREATED)


class UsageApi(APIView):
    @extend_schema(
        operation_id="usage_retrieve",
        responses={
            200: inline_serializer(
                name="Usage",
                fields={
                    "tier": serializers.DictField(help_text="Your effective limits (tier, with your overrides)."),
                    "buckets": serializers.ListField(child=serializers.DictField()),
                    "daily": serializers.ListField(child=serializers.DictField(), help_text="Last 30 days."),
                    "rejections": serializers.ListField(child=serializers.DictField(), help_text="Last 20 429s."),
                },
            )
        },
        description="Your tier's limits, your token bucket now (`available`, `full_at`) and concurrency, your "
        "tokens and runs per day (UTC, last 30 days, newest first; days without runs are left out) and your last "
        "20 refused prompts (`{at, status: 429, code, reason}`, newest first).",
    )
    def get(self, request: Request) -> Response:
        return Response(quota_usage(user=request_user(request)))
