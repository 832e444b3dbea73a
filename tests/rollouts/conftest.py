"""Fixtures of the rollout tests: the default version and a chat to hang runs on."""

from __future__ import annotations

import pytest

from chats.models import Chat
from deployments.models import ModelDeployment
from tests.factories import ChatFactory


@pytest.fixture
def v1() -> ModelDeployment:
    return ModelDeployment.objects.get(is_default=True)


@pytest.fixture
def chat() -> Chat:
    return ChatFactory.create()
