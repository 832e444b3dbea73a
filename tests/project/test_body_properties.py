"""Properties of the body parsers of ``/api`` and ``/v1`` (Hypothesis): whatever a client posts (any JSON value,
deep nesting, NUL and lone surrogates, huge numbers, wrong types, bytes that are not JSON), the answer is below
500 and is JSON, and a refused request writes nothing.

``/api`` runs in-process in one transaction per test. ``/v1`` needs committed rows (its database work runs on
``core.db_executor`` threads, with connections of their own), so its test is transactional; a completion that
is accepted is not waited for (no worker runs here): the run's end is stubbed, the rows it wrote stay.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import User
from chats.models import Chat, Message
from core.http.json_body import MAX_JSON_DEPTH
from openai_api import apis as openai_apis
from openai_api.streaming import ChoiceEvent, Completion
from runs.models import Run
from tests.factories import ChatFactory, UserFactory

EXAMPLES = hypothesis_settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,  # no example database in the work tree; a failure prints its reproduction
)

# -- what a hostile client sends ---------------------------------------------------------------------------

ODD_CHARACTERS = st.one_of(
    st.characters(),
    st.characters(categories=["Cs"]),  # lone surrogates: JSON's "\ud800"
    st.sampled_from(["\x00", "\ufeff", "\u2028", "\U0001f600", " ", "\n", '"', "\\", "[", "{"]),
)
ODD_TEXT = st.one_of(
    st.text(ODD_CHARACTERS, max_size=40),
    st.sampled_from(["", " ", "   \n\t", "x" * 201, "x" * 200 + " ", "\x00", "\ud800", "a\udfffb"]),
)
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**70),
    st.sampled_from([0, -1, 10**30, -(10**30), 2**31, 2**63]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324, 0.005, 2.0000001]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, ODD_TEXT)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(ODD_TEXT, inner, max_size=4)),
    max_leaves=12,
)


def _near(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies close to valid ones: each known field may be missing, right, or any JSON value; plus stray keys."""
    optional = {name: st.one_of(valid, JSON_VALUES) for name, valid in fields.items()}
    stray = st.dictionaries(st.sampled_from(["ignore_eos", "stop", "response_format", "owner", "id", ""]), JSON_VALUES)
    return st.tuples(st.fixed_dictionaries({}, optional=optional), stray, st.booleans()).map(
        lambda parts: {**parts[0], **(parts[1] if parts[2] else {})}
    )


def _deep(n: int, inner: str = "") -> str:
    return "[" * n + inner + "]" * n


RAW = st.one_of(
    st.binary(max_size=64),
    st.integers(min_value=MAX_JSON_DEPTH - 2, max_value=5_000).map(_deep),
    st.integers(min_value=MAX_JSON_DEPTH - 2, max_value=3_000).map(lambda n: '{"a": ' + "{" * n + "}" * n + "}"),
    st.sampled_from(
        [
            "",
            "{",
            '{"title": NaN}',
            '{"content": "hi", "temperature": Infinity}',
            '{"max_tokens": ' + "9" * 5000 + "}",
            '{"content": "hi"} trailing',
            '"\\ud800"',
            '{"\\ud800": 1}',
            '{"title": "\\u0000"}',
        ]
    ),
)


def _encode(body: Any) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str) and body.startswith("<raw>"):
        return body[len("<raw>") :].encode("utf-8", "surrogatepass")
    return json.dumps(body).encode()  # ensure_ascii: NUL and lone surrogates travel as \u escapes


def bodies(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Any JSON value, a near-valid body, or raw bytes (tagged ``<raw>`` when they are text)."""
    raw_text = RAW.map(lambda raw: raw if isinstance(raw, bytes) else "<raw>" + raw)
    return st.one_of(JSON_VALUES, _near(fields), raw_text)


CHAT_FIELDS = {"title": ODD_TEXT}
PROMPT_FIELDS = {
    "content": st.one_of(ODD_TEXT, st.just("What is 2 + 2?")),
    "max_tokens": st.one_of(st.integers(min_value=1, max_value=64), NUMBERS),
    "temperature": st.one_of(st.floats(min_value=0, max_value=2), NUMBERS),
    "top_p": st.one_of(st.floats(min_value=0.01, max_value=1), NUMBERS),
}
TOKEN_FIELDS = {"username": st.one_of(st.just("alice"), ODD_TEXT), "password": st.one_of(st.just("pw"), ODD_TEXT)}


def _messages() -> st.SearchStrategy[Any]:
    message = st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["user", "assistant", "system", "developer", "tool"]), JSON_VALUES)},
        optional={
            "content": st.one_of(
                ODD_TEXT,
                st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": ODD_TEXT}), max_size=3),
                JSON_VALUES,
            )
        },
    )
    return st.one_of(st.lists(message, min_size=1, max_size=4), JSON_VALUES)


def _conversations(served: str) -> st.SearchStrategy[dict[str, Any]]:
    """Well-formed calls whose texts are odd: they reach the services (and the database) unless refused."""
    turn = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": ODD_TEXT})
    prompt = ODD_TEXT.map(lambda text: f"hi {text}")  # not blank: the call gets past the check for that
    last = st.fixed_dictionaries(
        {
            "role": st.just("user"),
            "content": st.one_of(prompt, st.lists(st.builds(_part, prompt), min_size=1, max_size=2)),
        }
    )
    system = st.lists(st.fixed_dictionaries({"role": st.just("system"), "content": ODD_TEXT}), max_size=1)
    messages = st.tuples(system, st.lists(turn, max_size=2), last).map(lambda p: [*p[0], *p[1], p[2]])
    return st.fixed_dictionaries(
        {"model": st.just(served), "messages": messages}, optional={"max_tokens": st.integers(1, 32)}
    )


def _part(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


SERVED = settings.ENGINE.served_model_name


def completion_bodies() -> st.SearchStrategy[Any]:
    served = SERVED
    conversations = _conversations(served)
    return st.one_of(conversations, conversations, _any_completion(served))  # two to one: most reach the database


def _any_completion(served: str) -> st.SearchStrategy[Any]:
    return bodies(
        {
            "model": st.one_of(st.just(served), ODD_TEXT),
            "messages": _messages(),
            "max_tokens": st.one_of(st.integers(min_value=1, max_value=32), NUMBERS),
            "temperature": NUMBERS,
            "top_p": NUMBERS,
            "stream": st.one_of(st.booleans(), JSON_VALUES),
            "stop": JSON_VALUES,
            "n": NUMBERS,
        }
    )


# -- the properties ----------------------------------------------------------------------------------------


def _rows() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (User, Token, Chat, Message, Run))


def _check(resp: Any, before: tuple[int, ...], *, openai: bool = False) -> None:
    assert resp.status_code < 500, resp.content[:500]
    if resp.status_code >= 400:
        assert resp["Content-Type"] == "application/json", resp.content[:200]
        error = json.loads(resp.content)["error"]
        assert isinstance(error["message"], str) and error["message"]
        assert set(error) >= ({"message", "type", "param", "code"} if openai else {"code", "message"})
        assert _rows() == before, f"a refused request ({resp.status_code}) wrote rows"
    elif not resp.streaming:
        json.loads(resp.content)


@pytest.fixture
def owner(db: None) -> User:
    return UserFactory.create()


def known(valid: dict[str, Any]) -> Any:
    """The tester's cases, tried on every run besides what Hypothesis draws: deep nesting, a huge number, an
    unknown field, and a NUL and a lone surrogate in each text field of ``valid`` (a body that is accepted)."""
    bodies: list[Any] = [
        "<raw>" + _deep(10_000),
        "<raw>" + '{"max_tokens": ' + "9" * 5000 + "}",
        {**valid, "ignore_eos": True, "stop": ["\n"], "response_format": {"type": "json_object"}},
    ]
    for name, value in valid.items():
        if isinstance(value, str):
            bodies += [{**valid, name: "a\x00b"}, {**valid, name: "\ud800"}, {**valid, name: value + "\udfff"}]

    def decorate(test: Any) -> Any:
        for body in bodies:
            test = example(body=body)(test)
        return test

    return decorate


@pytest.mark.django_db
@EXAMPLES
@given(body=bodies(CHAT_FIELDS))
@known({"title": "t"})
def test_post_chats(owner: User, body: Any) -> None:
    api = APIClient()
    api.force_authenticate(owner)
    before = _rows()
    _check(api.post("/api/chats", _encode(body), content_type="application/json"), before)


@pytest.mark.django_db
@EXAMPLES
@given(body=bodies(CHAT_FIELDS))
@known({"title": "t"})
def test_patch_chat(owner: User, body: Any) -> None:
    api = APIClient()
    api.force_authenticate(owner)
    chat = ChatFactory.create(owner=owner, title="keep")
    before = _rows()
    resp = api.patch(f"/api/chats/{chat.pk}", _encode(body), content_type="application/json")
    _check(resp, before)
    if resp.status_code >= 400:
        chat.refresh_from_db()
        assert chat.title == "keep"


@pytest.mark.django_db
@EXAMPLES
@given(body=bodies(PROMPT_FIELDS))
@known({"content": "What is 2 + 2?", "max_tokens": 8})
def test_post_prompt(db: None, body: Any) -> None:
    # A fresh user and chat each time: no 409 or 429 because of the prompts accepted before.
    chat = ChatFactory.create(owner=UserFactory.create())
    api = APIClient()
    api.force_authenticate(chat.owner)
    before = _rows()
    _check(api.post(f"/api/chats/{chat.pk}/messages", _encode(body), content_type="application/json"), before)


@pytest.mark.django_db
@EXAMPLES
@given(body=bodies(TOKEN_FIELDS))
@known({"username": "alice", "password": "pw"})
def test_post_token(owner: User, body: Any) -> None:
    if not User.objects.filter(username="alice").exists():
        UserFactory.create(username="alice")
    before = _rows()
    resp = APIClient().post("/api/auth/token", _encode(body), content_type="application/json")
    _check(resp, before)


@pytest.fixture
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An accepted completion ends at once: no worker runs in this test."""

    async def collect(runs: Sequence[Run]) -> list[Completion]:
        return [Completion(text="ok", finish_reason="stop", prompt_tokens=1) for _ in runs]

    async def follow_choices(runs: Sequence[Run], completions: Sequence[Completion]) -> AsyncIterator[ChoiceEvent]:
        for index, completion in enumerate(completions):
            completion.finish_reason = "stop"
            yield ChoiceEvent(index=index, ended=True)

    monkeypatch.setattr(openai_apis, "collect", collect)
    monkeypatch.setattr(openai_apis, "follow_choices", follow_choices)
    yield


@pytest.mark.django_db(transaction=True)
@EXAMPLES
@given(body=completion_bodies())
@example(body="<raw>" + _deep(10_000))
@example(body={"model": SERVED, "messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "a\x00b"}]})
@example(body={"model": SERVED, "messages": [{"role": "user", "content": "\ud800"}]})
@example(body={"model": SERVED, "messages": [{"role": "system", "content": "\x00"}, {"role": "user", "content": "hi"}]})
def test_post_chat_completions(transactional_db: None, no_waiting: None, body: Any) -> None:
    token = Token.objects.create(user=UserFactory.create())  # a fresh user: no 429 for the calls accepted before
    before = _rows()
    resp = Client().post(
        "/v1/chat/completions",
        _encode(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token.key}"},
    )
    _check(resp, before, openai=True)
