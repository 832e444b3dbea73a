"""``POST /v1/moderations`` with the official ``openai`` client, on a live server (pytest-django's ``live_server``:
a real HTTP server in this process, on the test database), the classifier really run."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import openai
import pytest
from rest_framework.authtoken.models import Token

from moderation.backends import CATEGORIES
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

INSULT = "You are a fucking idiot."
CLEAN = "What is the capital of France?"


@pytest.fixture
def client(live_server: Any) -> openai.OpenAI:
    key = Token.objects.create(user=UserFactory.create()).key
    return openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=key, max_retries=0, timeout=30)


def test_the_client_reads_a_flagged_and_a_clean_result(client: openai.OpenAI) -> None:
    answer = client.moderations.create(model="omni-moderation-latest", input=[INSULT, CLEAN])
    assert answer.id.startswith("modr-") and answer.model == "local"
    insult, clean = answer.results
    assert insult.flagged and insult.categories.harassment and insult.category_scores.harassment > 0.9
    assert not clean.flagged and clean.category_scores.harassment < 0.2
    assert insult.category_applied_input_types.harassment == ["text"]
    # Categories the local model cannot judge are present, false, 0.0 and applied to no input type.
    assert insult.categories.self_harm is False and insult.category_scores.violence == 0.0
    assert insult.category_applied_input_types.sexual == []


def test_every_category_is_in_the_raw_answer(live_server: Any) -> None:
    key = Token.objects.create(user=UserFactory.create()).key
    request = urllib.request.Request(
        f"{live_server.url}/v1/moderations",
        data=json.dumps({"input": [{"type": "text", "text": INSULT}]}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.load(response)
    (result,) = body["results"]
    for field in ("categories", "category_scores", "category_applied_input_types"):
        assert list(result[field]) == list(CATEGORIES)
    assert result["flagged"] is True


def test_a_single_string_and_a_backend_by_name(client: openai.OpenAI) -> None:
    answer = client.moderations.create(model="local", input=CLEAN)
    assert len(answer.results) == 1 and not answer.results[0].flagged


@pytest.mark.parametrize(
    ("kwargs", "param", "fragment"),
    [
        ({"input": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}, "input[0]", "images"),
        ({"input": []}, "input", "empty"),
        ({"input": [CLEAN, 3]}, "input[1]", "string"),
        ({"input": CLEAN, "extra_body": {"temperature": 0}}, "temperature", "temperature"),
        ({"input": "x" * 1_000_000}, "input", "limit"),
    ],
)
def test_bad_requests_are_400s_naming_the_parameter(
    client: openai.OpenAI, kwargs: dict[str, Any], param: str, fragment: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.moderations.create(**kwargs)
    assert refused.value.status_code == 400
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == param and fragment in error["message"]


def test_an_unknown_model_is_a_404_and_no_token_a_401(client: openai.OpenAI, live_server: Any) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.moderations.create(model="llama-guard-9", input=CLEAN)
    assert isinstance(missing.value.body, dict) and missing.value.body["code"] == "model_not_found"
    anonymous = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        anonymous.moderations.create(input=CLEAN)
