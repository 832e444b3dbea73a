"""Memory endpoints: the user's switch (``/api/memory``) and their memories (``/api/memories``). Thin: validate,
call one service or selector, serialize."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import request_user
from core.errors import error_response
from core.http.pagination import BAD_PAGE, PAGE_PARAMS, keyset_paginate, page_response, parse_limit
from memory import selectors, services
from memory.models import Memory
from memory.serializers import (
    MemoryInSerializer,
    MemoryListSerializer,
    MemoryOutSerializer,
    MemoryStateInSerializer,
    MemoryStateSerializer,
)

INVALID = {400: error_response("Invalid body: says which field is wrong and why.")}
NOT_FOUND = {404: error_response("No such memory, or it belongs to another user.")}
OFF = {409: error_response("Memory is switched off for your tier (`memory_unavailable`).")}


def _state(request: Request) -> Response:
    user = request_user(request)
    return Response(
        MemoryStateSerializer(
            {
                "enabled": user.memory_enabled,
                "available": selectors.memory_available(tier=user.tier),
                "count": Memory.objects.filter(user=user).count(),
            }
        ).data
    )


class MemoryStateApi(APIView):
    @extend_schema(
        operation_id="memory_state",
        responses={200: MemoryStateSerializer},
        description="Whether your memory is on, whether your tier allows it, and how many memories you have.",
    )
    def get(self, request: Request) -> Response:
        return _state(request)

    @extend_schema(
        operation_id="memory_set",
        request=MemoryStateInSerializer,
        responses={200: MemoryStateSerializer, **INVALID, **OFF},
        description="Turn memory on or off. On: each prompt you post in a chat is kept, and a new prompt recalls "
        "the relevant ones from your other chats. Off: nothing is kept or recalled; your memories stay until you "
        "delete them. A partial update: `{}` changes nothing.",
    )
    def patch(self, request: Request) -> Response:
        body = MemoryStateInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if "enabled" in body.validated_data:
            services.memory_settings_set(user=request_user(request), enabled=body.validated_data["enabled"])
        return _state(request)


class MemoryListApi(APIView):
    @extend_schema(
        operation_id="memories_list",
        parameters=[
            OpenApiParameter(
                "q",
                {"type": "string", "maxLength": 200},
                description="Words to find in your memories (web-search syntax).",
            ),
            *PAGE_PARAMS,
        ],
        responses={200: page_response("MemoryPage", MemoryOutSerializer), **BAD_PAGE},
        description="Your memories, newest first; `q` finds those with its words (web-search syntax). Paged like "
        "the chat list.",
    )
    def get(self, request: Request) -> Response:
        params = MemoryListSerializer(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        page = keyset_paginate(
            selectors.memory_list(user=request_user(request), text=params.validated_data.get("q", "")),
            time_field="created_at",
            cursor=request.query_params.get("cursor"),
            limit=parse_limit(request.query_params.get("limit")),
        )
        return Response({"results": MemoryOutSerializer(page.items, many=True).data, "next_cursor": page.next_cursor})

    @extend_schema(
        operation_id="memories_add",
        request=MemoryInSerializer,
        responses={
            201: MemoryOutSerializer,
            **INVALID,
            **OFF,
            503: error_response("The embedding deployment did not answer: try again (`Retry-After`)."),
        },
        description="Add something for the assistant to remember about you (recalled in every chat where it is "
        "relevant, while memory is on).",
    )
    def post(self, request: Request) -> Response:
        body = MemoryInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        memory = services.memory_add(user=request_user(request), content=body.validated_data["content"])
        return Response(MemoryOutSerializer(memory).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="memories_clear",
        responses={200: OpenApiResponse(description="`{deleted: n}`")},
        description="Delete all your memories.",
    )
    def delete(self, request: Request) -> Response:
        return Response({"deleted": services.memory_clear(user=request_user(request))})


class MemoryDetailApi(APIView):
    @extend_schema(operation_id="memories_get", responses={200: MemoryOutSerializer, **NOT_FOUND})
    def get(self, request: Request, memory_id: int) -> Response:
        return Response(MemoryOutSerializer(_memory(request, memory_id)).data)

    @extend_schema(
        operation_id="memories_delete",
        responses={204: None, **NOT_FOUND},
        description="Delete one memory: it is never recalled again.",
    )
    def delete(self, request: Request, memory_id: int) -> Response:
        services.memory_delete(memory=_memory(request, memory_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


def _memory(request: Request, memory_id: int) -> Memory:
    memory = selectors.memory_get(user=request_user(request), memory_id=memory_id)
    if memory is None:
        raise NotFound("No such memory, or it belongs to another user.")
    return memory
