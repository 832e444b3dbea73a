"""The HTTP backend against a real server speaking OpenAI's moderation API: this project's own
``/v1/moderations`` on pytest-django's ``live_server``. And what it does when that server cannot answer."""

from __future__ import annotations

import dataclasses
import socket
from typing import Any

import pytest
from rest_framework.authtoken.models import Token

from moderation.backends import CATEGORIES, ModerationUnavailable, backend_for
from moderation.models import ModerationPolicy
from moderation.selectors import forget_cached_policies
from moderation.services import moderate_input
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _point_at(settings: Any, **fields: Any) -> None:
    settings.MODERATION = dataclasses.replace(settings.MODERATION, **fields)


@pytest.fixture
def served(live_server: Any, settings: Any) -> None:
    key = Token.objects.create(user=UserFactory.create()).key
    # model "local": the server answers with its local backend (never "http", which would call itself).
    _point_at(settings, http_url=f"{live_server.url}/v1", http_key=key, http_model="local")


@pytest.mark.usefixtures("served")
def test_it_classifies_through_the_server() -> None:
    insult, clean = backend_for("http").classify(["You are a fucking idiot.", "What is the capital of France?"])
    assert insult.backend == "http" and insult.flagged and insult.category_scores["harassment"] > 0.9
    assert list(insult.category_scores) == list(CATEGORIES)  # what the server answered: all thirteen
    assert not clean.flagged and clean.category_scores["harassment"] < 0.2


@pytest.mark.usefixtures("served")
def test_a_tier_policy_may_use_it() -> None:
    user = UserFactory.create()
    ModerationPolicy.objects.update_or_create(tier=user.tier, defaults={"backend": "http"})
    forget_cached_policies()
    verdict = moderate_input(user=user, tier=user.tier, text="Shut the fuck up.")
    assert verdict.flagged and verdict.backend == "http" and verdict.flagged_categories == ["harassment"]


def test_a_wrong_key_is_unavailable_not_clean(served: None, settings: Any) -> None:
    _point_at(settings, http_key="not-a-token")
    with pytest.raises(ModerationUnavailable) as failed:
        backend_for("http").classify(["hello"])
    assert failed.value.status_code == 503 and "401" in failed.value.message


def test_a_server_that_is_not_there_is_unavailable(settings: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    _point_at(settings, http_url=f"http://127.0.0.1:{port}/v1", http_timeout_s=2.0)
    with pytest.raises(ModerationUnavailable):
        backend_for("http").classify(["hello"])


def test_no_url_and_an_unknown_name_are_unavailable(settings: Any) -> None:
    _point_at(settings, http_url="")
    with pytest.raises(ModerationUnavailable):
        backend_for("http").classify(["hello"])
    with pytest.raises(ModerationUnavailable):
        backend_for("llama-guard")
