"""Writes to chats. Deleting a chat ends its runs first, so it lives with them (``runs.services.chat_delete``)."""

from __future__ import annotations

from accounts.models import User
from chats.models import Chat


def chat_create(*, user: User, title: str = "") -> Chat:
    return Chat.objects.create(owner=user, title=title)


def chat_update(*, chat: Chat, title: str) -> Chat:
    chat.title = title
    chat.save(update_fields=["title"])
    return chat
