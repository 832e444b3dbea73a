"""Keyset (cursor) pagination over ``(timestamp, id)``: stable while rows are inserted, no OFFSET scans."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from django.db.models import Model, Q, QuerySet

from chatproject.exceptions import DomainError

M = TypeVar("M", bound=Model)
T = TypeVar("T")

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


@dataclass(frozen=True)
class Page(Generic[T]):
    items: Sequence[T]
    next_cursor: str | None


def parse_limit(raw: str | None) -> int:
    if raw in (None, ""):
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        raise DomainError(f"limit must be an integer between 1 and {MAX_LIMIT}.", code="invalid_limit") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise DomainError(f"limit must be an integer between 1 and {MAX_LIMIT}.", code="invalid_limit")
    return limit


def _encode(ts: datetime, pk: int) -> str:
    return base64.urlsafe_b64encode(f"{ts.isoformat()}|{pk}".encode()).decode().rstrip("=")


def _decode(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        ts_text, pk_text = raw.split("|", 1)
        ts = datetime.fromisoformat(ts_text)
        if ts.tzinfo is None:
            raise ValueError("naive timestamp")
        return ts, int(pk_text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise DomainError("cursor is not valid: pass back a next_cursor value unchanged.", code="invalid_cursor") from None


def keyset_paginate(
    queryset: QuerySet[M], *, time_field: str, cursor: str | None, limit: int
) -> Page[M]:
    """Newest first by ``(time_field, id)``. The cursor names the last row seen; the next page starts below it."""
    qs = queryset.order_by(f"-{time_field}", "-id")
    if cursor:
        ts, pk = _decode(cursor)
        qs = qs.filter(Q(**{f"{time_field}__lt": ts}) | Q(**{time_field: ts, "id__lt": pk}))
    rows = list(qs[: limit + 1])
    items = rows[:limit]
    next_cursor = None
    if len(rows) > limit:
        last: Any = items[-1]
        next_cursor = _encode(getattr(last, time_field), last.pk)
    return Page(items=items, next_cursor=next_cursor)
