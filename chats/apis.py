"""Chat endpoints that touch chats alone (list, create, search, export). Thin: validate, call one service or
selector, serialize.

The endpoints of one chat (``/api/chats/{id}`` and its messages) show, create and cancel runs, so they live
a layer up, in ``runs.apis``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import request_user
from chats import export, selectors, services
from chats.serializers import (
    ChatExportSerializer,
    ChatInSerializer,
    ChatOutSerializer,
    ChatSearchHitSerializer,
    ChatSearchSerializer,
)
from core.errors import error_response
from core.http.pagination import BAD_PAGE, PAGE_PARAMS, keyset_paginate, page_response, parse_limit

INVALID = {400: error_response("Invalid body: says which field is wrong and why.")}
CHAT_NOT_FOUND = {404: error_response("No such chat, or it belongs to another user.")}


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


class ChatSearchApi(APIView):
    @extend_schema(
        operation_id="chats_search",
        parameters=[
            OpenApiParameter("q", str, required=True, description="What to find (1..200 characters)."),
            *PAGE_PARAMS,
        ],
        responses={200: page_response("ChatSearchPage", ChatSearchHitSerializer), **BAD_PAGE},
        description="Full-text search over the titles and messages of your chats (never another user's): one hit "
        "per chat, most recent activity first, with the newest matching message and a plain-text snippet. "
        'Paged like the chat list. `q` takes web-search syntax (`"a phrase"`, `or`, `-word`); an empty `q` '
        "is a 400.",
    )
    def get(self, request: Request) -> Response:
        params = ChatSearchSerializer(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        text = params.validated_data["q"]
        page = keyset_paginate(
            selectors.chat_search(user=request_user(request), text=text),
            time_field="updated_at",
            cursor=request.query_params.get("cursor"),
            limit=parse_limit(request.query_params.get("limit")),
        )
        hits = [dataclasses.asdict(hit) for hit in selectors.chat_search_hits(chats=page.items, text=text)]
        return Response({"results": ChatSearchHitSerializer(hits, many=True).data, "next_cursor": page.next_cursor})


class _FirstRenderer(DefaultContentNegotiation):
    """Leaves ``?format=`` to the view: DRF would read it as the renderer to answer with (a 404 for ``markdown``)."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        first = next(iter(renderers))
        return first, str(first.media_type)


class ChatExportApi(APIView):
    content_negotiation_class = _FirstRenderer

    @extend_schema(
        operation_id="chats_export",
        parameters=[ChatExportSerializer],
        responses={
            (200, "text/markdown"): OpenApiResponse(OpenApiTypes.STR),
            (200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT),
            **INVALID,
            **CHAT_NOT_FOUND,
        },
        description="The chat's current messages as a file to download (`Content-Disposition: attachment`): "
        "`format=markdown` (the default) or `json` (`{version, chat, messages}`).",
    )
    def get(self, request: Request, chat_id: int) -> HttpResponse:
        params = ChatExportSerializer(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        chat = selectors.chat_get(user=request_user(request), chat_id=chat_id)
        messages = list(selectors.message_export_list(chat=chat))
        if params.validated_data["format"] == "json":
            body, content_type, extension = export.export_json(chat, messages), "application/json", "json"
        else:
            body, content_type, extension = export.export_markdown(chat, messages), "text/markdown", "md"
        response = HttpResponse(body, content_type=f"{content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{export.export_filename(chat, extension)}"'
        return response
