"""Chat and message endpoints. Thin: validate, call one service or selector, serialize."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chatproject.pagination import keyset_paginate, parse_limit
from chats import selectors, services
from chats.serializers import ChatInSerializer, ChatOutSerializer, ChatUpdateSerializer, MessageOutSerializer
from runs.serializers import MessageCreateSerializer, RunOutSerializer
from runs.services import SamplingRequest, run_create

PAGE_PARAMS = [
    OpenApiParameter("cursor", str, description="next_cursor from the previous page"),
    OpenApiParameter("limit", int, description="1..100, default 20"),
]


def page_response(name: str, item: type[serializers.Serializer[Any]]) -> Any:
    return inline_serializer(
        name=name, fields={"results": item(many=True), "next_cursor": serializers.CharField(allow_null=True)}
    )


class ChatListCreateApi(APIView):
    @extend_schema(
        parameters=PAGE_PARAMS,
        responses=page_response("ChatPage", ChatOutSerializer),
        description="The user's chats, most recent activity first.",
    )
    def get(self, request: Request) -> Response:
        page = keyset_paginate(
            selectors.chat_list(user=request.user),  # type: ignore[arg-type]
            time_field="updated_at",
            cursor=request.query_params.get("cursor"),
            limit=parse_limit(request.query_params.get("limit")),
        )
        return Response(
            {"results": ChatOutSerializer(page.items, many=True).data, "next_cursor": page.next_cursor}
        )

    @extend_schema(request=ChatInSerializer, responses={201: ChatOutSerializer})
    def post(self, request: Request) -> Response:
        body = ChatInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        chat = services.chat_create(user=request.user, title=body.validated_data["title"])  # type: ignore[arg-type]
        return Response(ChatOutSerializer(chat).data, status=status.HTTP_201_CREATED)


class ChatDetailApi(APIView):
    @extend_schema(responses=ChatOutSerializer)
    def get(self, request: Request, chat_id: int) -> Response:
        chat = selectors.chat_get(user=request.user, chat_id=chat_id)  # type: ignore[arg-type]
        return Response(ChatOutSerializer(chat).data)

    @extend_schema(request=ChatUpdateSerializer, responses=ChatOutSerializer)
    def patch(self, request: Request, chat_id: int) -> Response:
        chat = selectors.chat_get(user=request.user, chat_id=chat_id)  # type: ignore[arg-type]
        body = ChatUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        chat = services.chat_update(chat=chat, title=body.validated_data["title"])
        return Response(ChatOutSerializer(chat).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, chat_id: int) -> Response:
        chat = selectors.chat_get(user=request.user, chat_id=chat_id)  # type: ignore[arg-type]
        services.chat_delete(chat=chat)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ChatMessagesApi(APIView):
    @extend_schema(
        parameters=PAGE_PARAMS,
        responses=page_response("MessagePage", MessageOutSerializer),
        description=(
            "The chat's messages, newest first (descending by creation time, then id); "
            "follow next_cursor to page towards older messages."
        ),
    )
    def get(self, request: Request, chat_id: int) -> Response:
        chat = selectors.chat_get(user=request.user, chat_id=chat_id)  # type: ignore[arg-type]
        page = keyset_paginate(
            selectors.message_list(chat=chat),
            time_field="created_at",
            cursor=request.query_params.get("cursor"),
            limit=parse_limit(request.query_params.get("limit")),
        )
        return Response(
            {"results": MessageOutSerializer(page.items, many=True).data, "next_cursor": page.next_cursor}
        )

    @extend_schema(
        request=MessageCreateSerializer,
        responses={
            202: inline_serializer(
                name="PromptAccepted",
                fields={
                    "run": RunOutSerializer(),
                    "message": MessageOutSerializer(),
                    "stream_url": serializers.CharField(),
                },
            )
        },
        description="Posts a prompt: stores the user message and a queued run, answers 202 at once. "
        "409 while the chat has an unfinished run; 429 with Retry-After when a limit is hit.",
    )
    def post(self, request: Request, chat_id: int) -> Response:
        chat = selectors.chat_get(user=request.user, chat_id=chat_id)  # type: ignore[arg-type]
        body = MessageCreateSerializer(
            data=request.data, max_content_chars=settings.CHAT_LIMITS.max_content_chars
        )
        body.is_valid(raise_exception=True)
        data = body.validated_data
        run = run_create(
            chat=chat,
            user=request.user,  # type: ignore[arg-type]
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
