"""Reads of chats and messages, always scoped to their owner."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchVector
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.shortcuts import get_object_or_404

from accounts.models import User
from chats.models import SEARCH_CONFIG, Chat, ChatOrigin, Message, MessageRole

START_SEL, STOP_SEL = "\x02", "\x03"
"""What ``ts_headline`` wraps the words found in; turned into ``highlights`` offsets (the text stays plain)."""


def chat_list(*, user: User) -> QuerySet[Chat]:
    return Chat.objects.filter(owner=user, origin=ChatOrigin.WEB).only(
        "id", "title", "model", "system_prompt", "temperature", "created_at", "updated_at", "owner_id"
    )


def chat_get(*, user: User, chat_id: int) -> Chat:
    """The user's chat, or 404: another user's chat is indistinguishable from a missing one."""
    return get_object_or_404(Chat, pk=chat_id, owner=user)


def chat_model(*, user: User, chat_id: int) -> tuple[str, str, float | None] | None:
    """The model the user's chat asks for (``""``: the default), its ``system_prompt`` and ``temperature`` settings,
    in one query; None when there is no such chat of theirs."""
    if not 0 < chat_id < 2**63:
        return None
    return Chat.objects.filter(pk=chat_id, owner=user).values_list("model", "system_prompt", "temperature").first()


def message_list(*, chat: Chat) -> QuerySet[Message]:
    """The chat's current messages (an answer's earlier versions are listed with it, not here)."""
    return Message.objects.filter(chat=chat, superseded=False)


def message_export_list(*, chat: Chat) -> QuerySet[Message]:
    """The chat's current messages, oldest first: what an export holds."""
    return message_list(chat=chat).order_by("id")


def _search_query(text: str) -> SearchQuery:
    # websearch_to_tsquery never raises on its input: quotes, operators and punctuation are parsed or dropped, and
    # the text is a bound parameter (SQL-like input is only words to it).
    return SearchQuery(text, search_type="websearch", config=SEARCH_CONFIG)


def chat_search(*, user: User, text: str) -> QuerySet[Chat]:
    """The user's web chats whose title or a current user/assistant message matches ``text`` (Postgres full-text
    search, ``websearch_to_tsquery``), on the GIN indexes ``chat_title_search`` and ``message_content_search``;
    ``title_headline`` is the title with the words found marked (:data:`START_SEL`)."""
    query = _search_query(text)
    messages = (
        Message.objects.annotate(found=SearchVector("content", config=SEARCH_CONFIG))
        .filter(chat_id=OuterRef("pk"), superseded=False, role__in=[MessageRole.USER, MessageRole.ASSISTANT])
        .filter(found=query)
    )
    return (
        Chat.objects.filter(owner=user, origin=ChatOrigin.WEB)
        .annotate(title_found=SearchVector("title", config=SEARCH_CONFIG))
        .filter(Q(title_found=query) | Exists(messages))
        .annotate(
            title_headline=SearchHeadline(
                "title", query, config=SEARCH_CONFIG, start_sel=START_SEL, stop_sel=STOP_SEL, highlight_all=True
            )
        )
        .only("id", "title", "updated_at")
    )


@dataclass(frozen=True)
class SearchHit:
    chat: int
    title: str
    message: int | None
    snippet: str
    highlights: list[tuple[int, int]]
    updated_at: object


def _marked(headline: str) -> tuple[str, list[tuple[int, int]]]:
    """``ts_headline`` output → plain text and the offsets of the marked words."""
    text: list[str] = []
    spans: list[tuple[int, int]] = []
    length, start = 0, None
    for char in headline:
        if char == START_SEL:
            start = length
        elif char == STOP_SEL:
            if start is not None:
                spans.append((start, length))
            start = None
        else:
            text.append(char)
            length += 1
    return "".join(text), spans


def chat_search_hits(*, chats: Sequence[Chat], text: str) -> list[SearchHit]:
    """One hit per chat of a page of :func:`chat_search`: its newest matching message with a snippet (one query),
    or its title when only the title matches."""
    query = _search_query(text)
    rows = (
        Message.objects.annotate(found=SearchVector("content", config=SEARCH_CONFIG))
        .filter(chat_id__in=[c.pk for c in chats], superseded=False)
        .filter(role__in=[MessageRole.USER, MessageRole.ASSISTANT], found=query)
        .order_by("chat_id", "-id")
        .distinct("chat_id")
        .annotate(
            headline=SearchHeadline(
                "content",
                query,
                config=SEARCH_CONFIG,
                start_sel=START_SEL,
                stop_sel=STOP_SEL,
                max_words=24,
                min_words=8,
            )
        )
        .values_list("chat_id", "id", "headline")
    )
    found = {chat_id: (message_id, headline) for chat_id, message_id, headline in rows}
    hits = []
    for chat in chats:
        message_id, headline = found.get(chat.pk, (None, getattr(chat, "title_headline", chat.title)))
        snippet, spans = _marked(headline)
        hits.append(
            SearchHit(
                chat=chat.pk,
                title=chat.title,
                message=message_id,
                snippet=snippet,
                highlights=spans,
                updated_at=chat.updated_at,
            )
        )
    return hits
