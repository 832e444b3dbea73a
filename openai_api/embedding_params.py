"""``/v1/embeddings`` bodies, checked as OpenAI and vLLM's server check them, with a message naming the parameter.

Accepted: ``model``, ``input`` (a string, a list of strings, a list of token ids, or a list of token-id lists),
``encoding_format`` (``float`` or ``base64``), ``dimensions``, ``user``, and vLLM's ``truncate_prompt_tokens`` and
``truncation_side``. Anything else is a 400 ``unknown_parameter``.

``dimensions``: all-MiniLM-L6-v2 was not trained Matryoshka-style, so a shortened vector is not a good embedding;
as vLLM (``PoolingParams``: "does not support Matryoshka embeddings") and OpenAI (a 400 for a model without
``dimensions``) do, any other size than the model's own is a 400. The model's own size is accepted (a client that
always sends it asks for nothing different).

Text is tokenized with the deployment's tokenizer, special tokens included (``[CLS] ... [SEP]``); token ids are
used as they are sent (vLLM does the same), so they must be the model's own ids. An input longer than the model's
length (256 tokens for all-MiniLM-L6-v2) is a 400 unless ``truncate_prompt_tokens`` asks for truncation
(``-1``: to the model's length).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.embedding_model import EmbeddingSpec
from openai_api.errors import OpenAIRequestError
from openai_api.params import refuse_unknown

EMBEDDING_PARAMS = frozenset(
    {"model", "input", "encoding_format", "dimensions", "user", "truncate_prompt_tokens", "truncation_side"}
)
ENCODINGS = ("float", "base64")


@dataclass(frozen=True)
class EmbeddingInputs:
    """The request's inputs, each either text or token ids, in order."""

    texts: list[str | None]
    """The texts (None where that input is token ids)."""
    token_ids: list[list[int] | None]
    """The token ids sent (None where that input is text)."""
    single: bool = False
    """``input`` was one string or one token-id list (errors name ``input``, not ``input[0]``)."""


@dataclass(frozen=True)
class EmbeddingsRequest:
    model: str
    inputs: EmbeddingInputs
    encoding_format: str
    truncate_to: int | None
    """Cut each input to this many tokens (special tokens included); None: refuse an input that is too long."""
    truncation_side: str
    user: str | None


def parse_embeddings(body: dict[str, Any], *, spec: EmbeddingSpec, max_inputs: int) -> EmbeddingsRequest:
    """The checked request; :class:`OpenAIRequestError` (400) naming the parameter otherwise."""
    refuse_unknown(body, EMBEDDING_PARAMS)
    model = body["model"]
    inputs = _inputs(body.get("input"), max_inputs=max_inputs)
    encoding = body.get("encoding_format")
    if encoding is None:
        encoding = "float"
    if encoding not in ENCODINGS:
        raise OpenAIRequestError(
            f"'encoding_format' must be 'float' or 'base64', not {encoding!r}.", param="encoding_format"
        )
    _check_dimensions(body.get("dimensions"), model=model, spec=spec)
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise OpenAIRequestError("'user' must be a string (an id for your end user).", param="user")
    side = body.get("truncation_side")
    if side is None:
        side = "right"
    if side not in ("left", "right"):
        raise OpenAIRequestError(
            "'truncation_side' must be 'right' (keep the first tokens) or 'left' (keep the last).",
            param="truncation_side",
        )
    return EmbeddingsRequest(
        model=model,
        inputs=inputs,
        encoding_format=encoding,
        truncate_to=_truncate_to(body.get("truncate_prompt_tokens"), spec),
        truncation_side=side,
        user=user,
    )


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def _inputs(value: Any, *, max_inputs: int) -> EmbeddingInputs:
    if value is None:
        raise OpenAIRequestError("'input' is required: a string, a list of strings or token ids.", param="input")
    if isinstance(value, str):
        items: list[Any] = [value]
    elif _is_ids(value) and value:
        items = [value]  # one input as token ids
    elif isinstance(value, list):
        items = value
    else:
        raise OpenAIRequestError(
            "'input' must be a string, a list of strings, a list of token ids or a list of token-id lists.",
            param="input",
        )
    if not items:
        raise OpenAIRequestError("'input' is empty: send at least one string or token-id list.", param="input")
    if len(items) > max_inputs:
        raise OpenAIRequestError(
            f"'input' holds {len(items)} inputs; at most {max_inputs} fit in one request: split it.", param="input"
        )
    texts: list[str | None] = []
    ids: list[list[int] | None] = []
    single = items is not value
    for index, item in enumerate(items):
        param = "input" if single else f"input[{index}]"
        if isinstance(item, str):
            if not item:
                raise OpenAIRequestError(f"'{param}' is an empty string: embed some text.", param=param)
            texts.append(item)
            ids.append(None)
        elif _is_ids(item):
            if not item:
                raise OpenAIRequestError(f"'{param}' is an empty token-id list.", param=param)
            texts.append(None)
            ids.append(list(item))
        else:
            raise OpenAIRequestError(f"'{param}' must be a string or a list of token ids (integers).", param=param)
    return EmbeddingInputs(texts=texts, token_ids=ids, single=single)


def _check_dimensions(value: Any, *, model: str, spec: EmbeddingSpec) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OpenAIRequestError("'dimensions' must be a positive whole number.", param="dimensions")
    if value != spec.dimensions:
        raise OpenAIRequestError(
            f"The model '{model}' does not support 'dimensions' other than its own {spec.dimensions} (it is not "
            "trained to be shortened, Matryoshka-style): leave 'dimensions' out.",
            param="dimensions",
            code="unsupported_dimensions",
        )


def _truncate_to(value: Any, spec: EmbeddingSpec) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1 or value == 0:
        raise OpenAIRequestError(
            f"'truncate_prompt_tokens' must be -1 (the model's length, {spec.max_tokens}) or a token count from 1.",
            param="truncate_prompt_tokens",
        )
    if value > spec.max_tokens:
        raise OpenAIRequestError(
            f"'truncate_prompt_tokens' is {value}, more than the model's length of {spec.max_tokens} tokens.",
            param="truncate_prompt_tokens",
        )
    return spec.max_tokens if value == -1 else value
