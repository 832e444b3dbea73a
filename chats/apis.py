"""Chat endpoints that touch chats alone (list, create). Thin: validate, call one service or selector, serialize.

The endpoints of one chat (``/api/chats/{id}`` and its messages) show, create and cancel runs, so they live
a layer up, in ``runs.apis``.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import request_user
from chats import selectors, services
from chats.serializers import ChatInSerializer, ChatOutSerializer
from core.errors import error_response
from core.http.pagination import BAD_PAGE, PAGE_PARAMS, keyset_paginate, page_response, parse_limit

INVALID = {400: error_response("Invalid body: says which field is wrong and why.")}


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

    @extend_schema(
        operation_id="chats_create",
        request=ChatInSerializer,
        responses={201: ChatOutSerializer, **INVALID, 404: error_response("`model` names no served model.")},
    )
    def post(self, request: Request) -> Response:
        body = ChatInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        chat = services.chat_create(user=request_user(request), title=data["title"], model=data["model"])
        return Response(ChatOutSerializer(chat).data, status=status.HTTP_201_CREATED)
