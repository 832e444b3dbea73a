"""``/v1/embeddings`` on a live web process and embedding worker, through the official ``openai`` client and
LangChain's ``OpenAIEmbeddings``: vectors as the reference computes them, OpenAI's error shapes, metering."""

from __future__ import annotations

import base64
import struct
from typing import Any

import openai
import pytest
from django.conf import settings
from langchain_openai import OpenAIEmbeddings
from rest_framework.authtoken.models import Token

from accounts.models import UsageDay, User, UserLimitOverride
from core.redis_client import get_redis
from scheduling.token_bucket import reservations_key
from tests.embeddings.helpers import SENTENCES, cosine, reference_tokens, reference_vectors
from tests.factories import UserFactory
from tests.live_stack import LiveStack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.live]

MODEL = "all-MiniLM-L6-v2"
TOLERANCE = 1e-4


def token_of(user: User) -> str:
    return Token.objects.create(user=user).key


def client_for(stack: LiveStack, user: User | None) -> openai.OpenAI:
    key = token_of(user) if user is not None else "not-a-token"
    return openai.OpenAI(base_url=stack.url("/v1"), api_key=key, max_retries=0, timeout=60)


def assert_matches_reference(vectors: list[list[float]], texts: list[str]) -> None:
    expected = reference_vectors(tuple(texts))
    assert len(vectors) == len(expected)
    for got, want in zip(vectors, expected, strict=True):
        assert len(got) == 384
        assert cosine(got, want) > 1 - TOLERANCE


def test_openai_client_floats_match_the_reference_and_are_metered(embedding_stack: LiveStack) -> None:
    user = UserFactory.create()
    result = client_for(embedding_stack, user).embeddings.create(
        model=MODEL, input=SENTENCES, encoding_format="float", user="end-user-1"
    )
    assert [item.index for item in result.data] == list(range(len(SENTENCES)))
    assert result.model == MODEL
    assert_matches_reference([item.embedding for item in result.data], SENTENCES)
    tokens = reference_tokens(SENTENCES)
    assert result.usage.prompt_tokens == result.usage.total_tokens == tokens
    usage = UsageDay.objects.get(user=user)
    assert (usage.embedding_requests, usage.embedding_tokens, usage.runs) == (1, tokens, 0)
    assert get_redis().zcard(reservations_key(user.pk)) == 0  # settled: no reservation left behind


def test_openai_client_default_base64_decodes_to_the_same_vectors(embedding_stack: LiveStack) -> None:
    client = client_for(embedding_stack, UserFactory.create())
    result = client.embeddings.create(model=MODEL, input=SENTENCES[0])  # the client asks for base64 and decodes it
    assert_matches_reference([result.data[0].embedding], SENTENCES[:1])
    raw = client.embeddings.with_raw_response.create(model=MODEL, input=SENTENCES[0], encoding_format="base64")
    packed = raw.http_response.json()["data"][0]["embedding"]
    decoded = list(struct.unpack("<384f", base64.b64decode(packed)))  # little-endian float32, as OpenAI's
    assert cosine(decoded, reference_vectors(tuple(SENTENCES[:1]))[0]) > 1 - TOLERANCE


def test_token_ids_are_embedded_as_sent(embedding_stack: LiveStack) -> None:
    from transformers import AutoTokenizer

    from tests.embeddings.helpers import model_folder

    ids = AutoTokenizer.from_pretrained(str(model_folder()))(SENTENCES[:2])["input_ids"]
    client = client_for(embedding_stack, UserFactory.create())
    one = client.embeddings.create(model=MODEL, input=ids[0], encoding_format="float")
    many = client.embeddings.create(model=MODEL, input=ids, encoding_format="float")
    assert_matches_reference([one.data[0].embedding], SENTENCES[:1])
    assert_matches_reference([item.embedding for item in many.data], SENTENCES[:2])
    assert many.usage.prompt_tokens == sum(len(x) for x in ids)


def test_langchain_openai_embeddings(embedding_stack: LiveStack) -> None:
    # check_embedding_ctx_length=False: by default LangChain sends tiktoken's ids (OpenAI's vocabulary), which are
    # not this model's token ids (docs/embeddings.md).
    embeddings = OpenAIEmbeddings(
        model=MODEL,
        base_url=embedding_stack.url("/v1"),
        api_key=token_of(UserFactory.create()),  # type: ignore[arg-type]
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    assert_matches_reference(embeddings.embed_documents(SENTENCES), SENTENCES)
    assert_matches_reference([embeddings.embed_query(SENTENCES[1])], SENTENCES[1:2])


def test_truncation_only_when_asked(embedding_stack: LiveStack) -> None:
    client = client_for(embedding_stack, UserFactory.create())
    long_text = "word " * 400
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=MODEL, input=long_text)
    assert refused.value.code == "context_length_exceeded"
    assert "256" in refused.value.message
    cut = client.embeddings.create(
        model=MODEL, input=long_text, encoding_format="float", extra_body={"truncate_prompt_tokens": -1}
    )
    assert cut.usage.prompt_tokens == 256
    assert cosine(cut.data[0].embedding, reference_vectors((long_text,))[0]) > 1 - TOLERANCE  # the card cuts at 256


def error_of(exc: pytest.ExceptionInfo[openai.APIStatusError]) -> dict[str, Any]:
    body = exc.value.body
    assert isinstance(body, dict)
    return body


@pytest.mark.parametrize(
    ("kwargs", "status", "code", "param"),
    [
        ({"input": "hi", "extra_body": {"temperature": 1}}, 400, "unknown_parameter", "temperature"),
        ({"input": ""}, 400, None, "input"),
        ({"input": []}, 400, None, "input"),
        ({"input": ["ok", ""]}, 400, None, "input[1]"),
        ({"input": [[101, 999999, 102]]}, 400, None, "input[0]"),
        ({"input": "hi", "dimensions": 128}, 400, "unsupported_dimensions", "dimensions"),
        ({"input": "hi", "encoding_format": "int8"}, 400, None, "encoding_format"),
        ({"input": "hi", "model": "no-such-model"}, 404, "model_not_found", "model"),
        ({"input": "hi", "model": settings.ENGINE.served_model_name}, 404, "model_wrong_kind", "model"),
    ],
)
def test_refusals_in_openai_shape_write_nothing(
    embedding_stack: LiveStack, kwargs: dict[str, Any], status: int, code: str | None, param: str
) -> None:
    user = UserFactory.create()
    client = client_for(embedding_stack, user)
    with pytest.raises(openai.APIStatusError) as refused:
        client.embeddings.create(**{"model": MODEL, "encoding_format": "float", **kwargs})
    assert refused.value.status_code == status
    error = error_of(refused)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    if code is not None:
        assert error["code"] == code
    assert error["message"]
    assert not UsageDay.objects.filter(user=user).exists()
    assert get_redis().zcard(reservations_key(user.pk)) == 0


def test_a_chat_model_is_no_embedding_model_and_back(embedding_stack: LiveStack) -> None:
    client = client_for(embedding_stack, UserFactory.create())
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert error_of(refused)["code"] == "model_wrong_kind"
    assert "embedding model" in refused.value.message
    assert MODEL in [m.id for m in client.models.list().data]


def test_unauthenticated_is_401(embedding_stack: LiveStack) -> None:
    with pytest.raises(openai.AuthenticationError):
        client_for(embedding_stack, None).embeddings.create(model=MODEL, input="hi")


def test_tokens_count_against_the_token_budget(embedding_stack: LiveStack) -> None:
    user = UserFactory.create()
    UserLimitOverride.objects.create(user=user, bucket_capacity_tokens=30, bucket_refill_per_s=0.001)
    client = client_for(embedding_stack, user)
    with pytest.raises(openai.BadRequestError) as never:
        client.embeddings.create(model=MODEL, input="word " * 40)  # 42 tokens: more than the bucket ever holds
    assert error_of(never)["code"] == "prompt_too_large"
    client.embeddings.create(model=MODEL, input="word " * 18)  # 20 tokens
    with pytest.raises(openai.RateLimitError) as limited:
        client.embeddings.create(model=MODEL, input="word " * 18)
    assert limited.value.response.headers.get("Retry-After")
    usage = UsageDay.objects.get(user=user)
    assert (usage.embedding_requests, usage.embedding_tokens) == (1, 20)
