"""Keyset (cursor) pagination over ``(timestamp, id)``, newest first.

Stable while rows are inserted: the cursor names the last row seen, so a row added later either sorts
before it (it shows on a fresh first page) or is not there yet; no row is shown twice and none is skipped.
No ``OFFSET`` scans: each page is an index range read on ``(owner or chat, -time, -id)``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from django.db.models import Model, Q, QuerySet
from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers

from core.errors import DomainError, error_response

M = TypeVar("M", bound=Model)
T = TypeVar("T")

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
_MAX_PK = 2**63 - 1  # bigint
_MAX_CURSOR_CHARS = 200


@dataclass(frozen=True)
class Page(Generic[T]):
    items: Sequence[T]
    next_cursor: str | None


def parse_limit(raw: str | None) -> int:
    """The ``limit`` query parameter: absent means the default; anything but 1..MAX_LIMIT is a 400, an empty
    ``?limit=`` included (the schema says integer, and an empty value is none)."""
    if raw is None:
        return DEFAULT_LIMIT
    message = f"limit must be an integer between 1 and {MAX_LIMIT}; leave it out for {DEFAULT_LIMIT}."
    if not (raw.isascii() and raw.isdigit()):
        raise DomainError(message, code="invalid_limit")
    limit = int(raw)
    if not 1 <= limit <= MAX_LIMIT:
        raise DomainError(message, code="invalid_limit")
    return limit


def encode_cursor(ts: datetime, pk: int) -> str:
    return base64.urlsafe_b64encode(f"{ts.isoformat()}|{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        if len(cursor) > _MAX_CURSOR_CHARS:
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        ts_text, pk_text = raw.split("|", 1)
        ts = datetime.fromisoformat(ts_text)
        if ts.tzinfo is None:
            raise ValueError("naive timestamp")
        if not (pk_text.isascii() and pk_text.isdigit()) or not 0 < int(pk_text) <= _MAX_PK:
            raise ValueError("id out of range")
        return ts, int(pk_text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise DomainError(
            "cursor is not valid: pass back a next_cursor value unchanged.", code="invalid_cursor"
        ) from None


def keyset_paginate(queryset: QuerySet[M], *, time_field: str, cursor: str | None, limit: int) -> Page[M]:
    """Newest first by ``(time_field, id)``. The cursor names the last row seen; the next page starts below it."""
    qs = queryset.order_by(f"-{time_field}", "-id")
    if cursor:
        ts, pk = decode_cursor(cursor)
        qs = qs.filter(Q(**{f"{time_field}__lt": ts}) | Q(**{time_field: ts, "id__lt": pk}))
    rows = list(qs[: limit + 1])
    items = rows[:limit]
    next_cursor = None
    if len(rows) > limit:
        last = items[-1]
        next_cursor = encode_cursor(getattr(last, time_field), last.pk)
    return Page(items=items, next_cursor=next_cursor)


PAGE_PARAMS = [
    OpenApiParameter(
        "cursor", str, description="`next_cursor` of the previous page; omit it (or leave it empty) for the first page."
    ),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
        description=f"Page size, 1..{MAX_LIMIT} (default {DEFAULT_LIMIT}); anything else, an empty value included, "
        "is a 400.",
    ),
]
"""The OpenAPI query parameters of a paginated list."""
BAD_PAGE = {400: error_response("Invalid cursor or limit.")}


def page_response(name: str, item: type[serializers.Serializer[Any]]) -> Any:
    """The OpenAPI shape of one page of ``item``: ``{results: [...], next_cursor}``."""
    return inline_serializer(
        name=name,
        fields={
            "results": item(many=True),
            "next_cursor": serializers.CharField(allow_null=True, help_text="null on the last page."),
        },
    )
