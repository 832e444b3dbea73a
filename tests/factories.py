"""Row factories for tests (one place)."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth.hashers import make_password

from accounts.models import Tier, User
from chats.models import Chat, Message, MessageRole
from runs.models import Run, RunStatus


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = User

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.LazyFunction(lambda: make_password("pw"))

    @factory.lazy_attribute
    def tier(self) -> Tier:
        return Tier.objects.get(name="free")

    @classmethod
    def with_tier(cls, name: str, **kwargs: Any) -> User:
        return cls.create(tier=Tier.objects.get(name=name), **kwargs)


class ChatFactory(factory.django.DjangoModelFactory[Chat]):
    class Meta:
        model = Chat

    owner = factory.SubFactory(UserFactory)
    title = factory.Sequence(lambda n: f"chat {n}")


class MessageFactory(factory.django.DjangoModelFactory[Message]):
    class Meta:
        model = Message

    chat = factory.SubFactory(ChatFactory)
    role = MessageRole.USER
    content = factory.Sequence(lambda n: f"message {n}")


class RunFactory(factory.django.DjangoModelFactory[Run]):
    class Meta:
        model = Run

    chat = factory.SubFactory(ChatFactory)
    user = factory.LazyAttribute(lambda o: o.chat.owner)
    tier = factory.LazyAttribute(lambda o: o.user.tier)
    user_message = factory.SubFactory(MessageFactory, chat=factory.SelfAttribute("..chat"))
    status = RunStatus.QUEUED
    max_tokens = 64
