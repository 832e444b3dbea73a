"""``POST /v1/embeddings``: OpenAI's embeddings endpoint, served by the embedding deployments.

The steps, every refusal before anything is written: the bearer token (401); the body (400, 413); ``model``
resolved to an embedding deployment with a ready worker (404 ``model_not_found``, 404 ``model_wrong_kind`` for a
chat model, 503); the parameters (``openai_api.embedding_params``: 400 naming the one to fix); the inputs
tokenized and held to the model's length (400 unless ``truncate_prompt_tokens``); admission of their tokens in the
user's token bucket (429 with ``Retry-After``). Then the vectors come from the deployment's embedding workers
(``deployments.embeddings``: one Redis round trip, batched on the worker), the reservation is settled and the day's
usage row counts the request and its tokens.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from accounts.models import User
from core.db_executor import db_call
from core.errors import DomainError
from deployments.embeddings import Vector, embed_ids_async, embedding_spec, tokenize, tokenizer_of
from deployments.models import DeploymentKind
from deployments.selection import Served, resolve_model
from generation.embedding_contract import pack_vector
from openai_api.apis import _authorized, read_body_and_model
from openai_api.embedding_params import EmbeddingsRequest, parse_embeddings
from openai_api.errors import OpenAIRequestError, from_domain_error, from_request_error
from runs.embedding_quota import embedding_admit, embedding_settle


def _resolve(model: str) -> Served:
    return resolve_model(model, kind=DeploymentKind.EMBED)


def token_inputs(parsed: EmbeddingsRequest, served: Served) -> list[list[int]]:
    """Each input as the token ids the model embeds, within its length (400 naming the input otherwise)."""
    spec = embedding_spec(served)
    limit = parsed.truncate_to or spec.max_tokens
    texts = [text for text in parsed.inputs.texts if text is not None]
    tokenized = iter(tokenize(texts, served, truncate_to=parsed.truncate_to, truncation_side=parsed.truncation_side))
    vocab = len(tokenizer_of(served))
    single = parsed.inputs.single
    result: list[list[int]] = []
    for index, sent in enumerate(parsed.inputs.token_ids):
        param = "input" if single else f"input[{index}]"
        if sent is None:
            ids = next(tokenized)
        else:
            bad = next((t for t in sent if not 0 <= t < vocab), None)
            if bad is not None:
                raise OpenAIRequestError(
                    f"'{param}' holds token id {bad}, outside this model's vocabulary (0 to {vocab - 1}): send the "
                    "model's own token ids, or text.",
                    param=param,
                )
            ids = _cut(sent, parsed) if parsed.truncate_to else sent
        if len(ids) > limit:
            raise OpenAIRequestError(
                f"'{param}' is {len(ids)} tokens long; the model '{parsed.model}' takes at most {spec.max_tokens}: "
                "shorten it, or send 'truncate_prompt_tokens': -1 to cut it to the model's length.",
                param=param,
                code="context_length_exceeded",
            )
        result.append(ids)
    return result


def _cut(ids: list[int], parsed: EmbeddingsRequest) -> list[int]:
    keep = parsed.truncate_to or len(ids)
    return ids[:keep] if parsed.truncation_side == "right" else ids[-keep:]


def _body(parsed: EmbeddingsRequest, vectors: list[Vector], tokens: int) -> dict[str, Any]:
    base64 = parsed.encoding_format == "base64"
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": pack_vector(vector) if base64 else vector}
            for index, vector in enumerate(vectors)
        ],
        "model": parsed.model,  # echoed as sent, as for completions
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


@csrf_exempt  # bearer tokens only: no cookie is read
async def embeddings(request: HttpRequest) -> HttpResponse:
    user = await _authorized(request, "POST")
    if isinstance(user, HttpResponse):
        return user
    found = await read_body_and_model(request, resolve=_resolve)
    if isinstance(found, HttpResponse):
        return found
    body, served = found
    try:
        parsed = parse_embeddings(body, spec=embedding_spec(served), max_inputs=settings.EMBEDDINGS.max_inputs)
        inputs = token_inputs(parsed, served)
    except OpenAIRequestError as exc:
        return from_request_error(exc)
    except DomainError as exc:  # its tokenizer is still loading: a 503
        return from_domain_error(exc)
    tokens = sum(len(ids) for ids in inputs)
    return await _answer(user, parsed, served, inputs, tokens)


async def _answer(
    user: User, parsed: EmbeddingsRequest, served: Served, inputs: list[list[int]], tokens: int
) -> HttpResponse:
    try:
        ticket = await db_call(lambda: embedding_admit(user=user, tokens=tokens))
    except DomainError as exc:
        return from_domain_error(exc)
    answered = False
    try:
        vectors = await embed_ids_async(inputs, served)
        answered = True
    except DomainError as exc:
        return from_domain_error(exc)
    finally:
        await db_call(lambda: embedding_settle(ticket=ticket, answered=answered))
    return JsonResponse(_body(parsed, vectors, tokens))
