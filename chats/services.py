"""Writes to chats. Deleting a chat ends its runs first, so it lives with them (``runs.services.chat_delete``)."""

from __future__ import annotations

from accounts.models import User
from chats.models import Chat
from deployments.selection import check_model


def chat_create(*, user: User, title: str = "", model: str = "") -> Chat:
    """A new chat; ``model`` must name a served model (``deployments.selection.check_model``: 400/404 first)."""
    return Chat.objects.create(owner=user, title=title, model=check_model(model))


def chat_update(*, chat: Chat, title: str | None = None, model: str | None = None) -> Chat:
    """Renames the chat and/or changes its model (None: left as it is)."""
    fields = []
    if title is not None:
        chat.title = title
        fields.append("title")
    if model is not None:
        chat.model = check_model(model)
        fields.append("model")
    if fields:
        chat.save(update_fields=fields)
    return chat
