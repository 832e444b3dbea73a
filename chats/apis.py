"""Chat and message endpoints. Thin: validate, call one service or selector, serialize."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import User
from chatproject.exceptions import error_response
from chatproject.pagination import MAX_LIMIT, keyset_paginate, parse_limit
from chats import selectors, services
from chats.serializers import (
    ChatDetailOutSerializer,
    ChatInSerializer,
    ChatOutSerializer,
    ChatUpdateSerializer,
    MessageCreateSerializer,
    MessageOutSerializer,
)
from runs.serializers import RunOutSerializer
from runs.services import SamplingRequest, run_create

PAGE_PARAMS = [
    OpenApiParameter("cursor", str, description="`next_cursor` of the previous page; omit for the first page."),
    OpenApiParameter("limit", int, description=f"Page size, 1..{MAX_LIMIT} (default 20)."),
]
NOT_FOUND = {404: error_response("No such chat, or it belongs to another user.")}
BAD_PAGE = {400: error_response("Invalid cursor or limit.")}
INVALID = {400: error_response("Invalid body: says which field is wrong and why.")}


def page_response(name: str, item: type[serializers.Serializer[Any]]) -> Any:
    return inline_serializer(
        name=name,
        fields={
            "results": item(many=True),
            "next_cursor": serializers.CharField(allow_null=True, help_text="null on the last page."),
        },
    )


def request_user(request: Request) -> User:
    """The authenticated user (the permission classes have already refused anonymous requests)."""
    return cast(User, request.user)


class ChatListCreateApi(APIView):
    @extend_schema(
        operation_id="chats_list",
        parameters=PAGE_PARAMS,
        responses={200: page_response("ChatPage", ChatOutSerializer), **BAD_PAGE},
        description="The user's chats, most recent activity first (descending `updated_at`, then id); "
        "follow `next_cursor` for older ones. Chats created while paging appear on the first page, never twice.",
    )
    def get(self, request: Request) -> Response:
        page = keyset_paginate(
            selectors.chat_list(user=request_user(request)),
            time_field="updated_at",
            cursor=request.query_params.get("cursor"),
            limit=parse_limit(request.query_params.get("limit")),
        )
        return Response({"results": ChatOutSerializer(page.items, many=True).data, "next_cursor": page.next_cursor})

    @extend_schema(operation_id="chats_create", request=ChatInSerializer, responses={201: ChatOutSerializer, **INVALID})
    def post(self, request: Request) -> Response:
        body = ChatInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        chat = services.chat_create(user=request_user(request), title=body.validated_data["title"])
        return Response(ChatOutSerializer(chat).data, status=status.HTTP_201_CREATED)


class ChatDetailApi(APIView):
    @extend_schema(
        operation_id="chats_retrieve",
        responses={200: ChatDetailOutSerializer, **NOT_FOUND},
        description="The chat, with `active_run`: its queued or streaming run (null when none) to resume.",
    )
    def get(self, request: Request, chat_id: int) -> Response:
        chat = selectors.chat_get(user=request_user(request), chat_id=chat_id)
        return Response(ChatDetailOutSerializer(chat).data)

    @extend_schema(
        operation_id="chats_partial_update",
        request=ChatUpdateSerializer,
        responses={200: ChatOutSerializer, **INVALID, **NOT_FOUND},
        description="Renames the chat.",
    )
    def patch(self, request: Request, chat_id: int) -> Response:
        chat = selectors.chat_get(user=request_user(request), chat_id=chat_id)
        body = ChatUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        chat = services.chat_update(chat=chat, title=body.validated_data["title"])
        return Response(ChatOutSerializer(chat).data)

    @extend_schema(
        operation_id="chats_destroy",
        responses={204: None, **NOT_FOUND},
        description="Deletes the chat with its messages and runs; an unfinished run is cancelled first.",
    )
    def delete(self, request: Request, chat_id: int) -> Response:
        chat = selectors.chat_get(user=request_user(request), chat_id=chat_id)
        services.chat_delete(chat=chat)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ChatMessagesApi(APIView):
    @extend_schema(
        operation_id="chats_messages_list",
        parameters=PAGE_PARAMS,
        responses={200: page_response("MessagePage", MessageOutSerializer), **BAD_PAGE, **NOT_FOUND},
        description="The chat's messages, newest first (descending `created_at`, then id); follow `next_cursor` "
        "to page towards older messages. Messages added while paging never shift the later pages.",
    )
    def get(self, request: Request, chat_id: int) -> Response:
        chat = selectors.chat_get(user=request_user(request), chat_id=chat_id)
        page = keyset_paginate(
            selectors.message_list(chat=chat),
            time_field="created_at",
            cursor=request.query_params.get("cursor"),
            limit=parse_limit(request.query_params.get("limit")),
        )
        return Response({"results": MessageOutSerializer(page.items, many=True).data, "next_cursor": page.next_cursor})

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
            **NOT_FOUND,
            409: error_response("The chat already has a run that has not ended."),
            429: error_response("A rate or concurrency limit was hit; retry after the Retry-After header."),
        },
        description="Posts a prompt: stores the user message and a queued run in one transaction and answers "
        "202 at once; the answer streams from `stream_url`.",
    )
    def post(self, request: Request, chat_id: int) -> Response:
        user = request_user(request)
        chat = selectors.chat_get(user=user, chat_id=chat_id)
        body = MessageCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        run = run_create(
            chat=chat,
            user=user,
            content=data["content"],
            sampling=SamplingRequest(
                max_tokens=data.get("max_tokens"), temperature=data["temperature"], top_p=data["top_p"]
            ),
        )
        run_data = RunOutSerializer(run).data
        return Response(
            {
                "run": run_data,
                "message": MessageOutSerializer(run.user_message).data,
                "stream_url": run_data["stream_url"],
            },
            status=status.HTTP_202_ACCEPTED,
        )
