"""Writes to chats and messages."""

from __future__ import annotations

from django.db import transaction

from accounts.models import User
from chats.models import Chat


def chat_create(*, user: User, title: str = "") -> Chat:
    return Chat.objects.create(owner=user, title=title)


def chat_update(*, chat: Chat, title: str) -> Chat:
    chat.title = title
    chat.save(update_fields=["title"])
    return chat


@transaction.atomic
def chat_delete(*, chat: Chat) -> None:
    """Deletes the chat and everything in it. Active runs are cancelled first so workers stop generating.

    Locks the chat row (``SELECT ... FOR UPDATE``) like ``run_create`` does, so a prompt posted at the same
    moment either lands before (and its run is cancelled here) or finds the chat gone.
    """
    from runs.services import run_cancel_all_for_chat

    Chat.objects.select_for_update().filter(pk=chat.pk).first()
    run_cancel_all_for_chat(chat=chat)
    chat.delete()
