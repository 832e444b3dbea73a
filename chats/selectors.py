"""Reads of chats and messages, always scoped to their owner."""

from __future__ import annotations

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from accounts.models import User
from chats.models import Chat, ChatOrigin, Message


def chat_list(*, user: User) -> QuerySet[Chat]:
    return Chat.objects.filter(owner=user, origin=ChatOrigin.WEB).only(
        "id", "title", "model", "created_at", "updated_at", "owner_id"
    )


def chat_get(*, user: User, chat_id: int) -> Chat:
    """The user's chat, or 404: another user's chat is indistinguishable from a missing one."""
    return get_object_or_404(Chat, pk=chat_id, owner=user)


def chat_model(*, user: User, chat_id: int) -> str | None:
    """The model the user's chat asks for (``""``: the default); None when there is no such chat of theirs."""
    if not 0 < chat_id < 2**63:
        return None
    return Chat.objects.filter(pk=chat_id, owner=user).values_list("model", flat=True).first()


def message_list(*, chat: Chat) -> QuerySet[Message]:
    return Message.objects.filter(chat=chat)
