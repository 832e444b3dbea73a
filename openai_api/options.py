"""OpenAI's own request parameters that are not sampling: what each means here, read and checked as OpenAI checks it.

- ``metadata``: the caller's tags, kept on the run (``Run.metadata``) and shown in its JSON; at most
  :data:`MAX_METADATA_PAIRS` string pairs, keys up to :data:`MAX_METADATA_KEY` characters, values up to
  :data:`MAX_METADATA_VALUE`.
- ``store``: recorded on the run (``Run.store``; OpenAI's default for chat completions, false, when left out).
  Every call is recorded here anyway (its API chat, for usage and the run's JSON); ``/v1/responses`` reads the flag
  to decide what may be retrieved.
- ``service_tier``: one of OpenAI's (``auto``, ``default``, ``flex``, ``scale``, ``priority``) or a tier's name,
  mapped onto the user's tiers (``openai_api.service_tier``), never above the user's own.
- ``prompt_cache_key``: the caller's runs with the same key prefer the worker that served the last of them.
- ``safety_identifier``: the caller's end user, like ``user`` (``Run.end_user``), which it replaces.
- ``reasoning_effort``, ``verbosity``: this model has neither; a value is a 400 worded as OpenAI words it for a
  model without them (null is the default, and accepted).

Shared by ``/v1/chat/completions`` and ``/v1/responses``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.http.text import echo, text_problem
from openai_api.errors import OpenAIRequestError
from openai_api.params import MAX_USER_CHARS

MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
MAX_CACHE_KEY_CHARS = 256
MAX_SERVICE_TIER_CHARS = 32
OPENAI_SERVICE_TIERS = ("auto", "default", "flex", "scale", "priority")
UNSUPPORTED_WITH_THIS_MODEL = ("reasoning_effort", "verbosity")

OPTION_PARAMS = frozenset(
    {"metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier", *UNSUPPORTED_WITH_THIS_MODEL}
)
"""The names :func:`parse_options` reads (each endpoint adds them to the parameters it takes)."""


@dataclass(frozen=True)
class RequestOptions:
    metadata: dict[str, str] = field(default_factory=dict)
    store: bool = False
    service_tier: str | None = None
    """As sent (None: left out, the user's own tier); resolved against the tiers when the runs are created."""
    prompt_cache_key: str = ""
    safety_identifier: str = ""


def parse_metadata(value: Any) -> dict[str, str]:
    """OpenAI's ``metadata`` (chat completions and responses) as OpenAI checks it; every key and value must also be
    storable (``Run.metadata`` is Postgres ``jsonb``: no NUL, no lone surrogate)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OpenAIRequestError(
            "'metadata' must be an object of string keys and string values.", param="metadata", code="invalid_type"
        )
    if len(value) > MAX_METADATA_PAIRS:
        raise OpenAIRequestError(
            f"'metadata' holds {len(value)} pairs; at most {MAX_METADATA_PAIRS} are allowed.",
            param="metadata",
            code="invalid_metadata",
        )
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY:
            raise OpenAIRequestError(
                f"'metadata' key {echo(key)} is {len(key)} characters long; keys are at most {MAX_METADATA_KEY}.",
                param="metadata",
                code="invalid_metadata",
            )
        if not isinstance(item, str):
            raise OpenAIRequestError(
                f"'metadata.{echo(key)}' must be a string; got {type(item).__name__}.",
                param=f"metadata.{key}",
                code="invalid_metadata",
            )
        if len(item) > MAX_METADATA_VALUE:
            raise OpenAIRequestError(
                f"'metadata.{echo(key)}' is {len(item)} characters long; values are at most {MAX_METADATA_VALUE}.",
                param=f"metadata.{key}",
                code="invalid_metadata",
            )
        for text, where in ((key, "metadata"), (item, f"metadata.{key}")):
            problem = text_problem(text)
            if problem is not None:
                raise OpenAIRequestError(f"'{where}' {problem}", param=where, code="invalid_text")
    return dict(value)


def _string(body: dict[str, Any], name: str, limit: int) -> str:
    value = body.get(name)
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        raise OpenAIRequestError(f"'{name}' must be a string of at most {limit} characters.", param=name)
    return value


def refuse_unsupported_with_this_model(body: dict[str, Any]) -> None:
    """``reasoning_effort`` and ``verbosity`` (this model has neither), answered as OpenAI answers them."""
    for name in UNSUPPORTED_WITH_THIS_MODEL:
        if body.get(name) is not None:
            raise OpenAIRequestError(
                f"Unsupported parameter: '{name}' is not supported with this model.",
                param=name,
                code="unsupported_parameter",
            )


def parse_service_tier(body: dict[str, Any]) -> str | None:
    """``service_tier`` as sent (checked for its shape; ``openai_api.service_tier`` maps it onto a tier)."""
    tier = body.get("service_tier")
    if tier is not None and (not isinstance(tier, str) or not tier or len(tier) > MAX_SERVICE_TIER_CHARS):
        raise OpenAIRequestError(
            f"'service_tier' must be one of {', '.join(OPENAI_SERVICE_TIERS)} or a tier's name.", param="service_tier"
        )
    return tier


def parse_prompt_cache_key(body: dict[str, Any]) -> str:
    return _string(body, "prompt_cache_key", MAX_CACHE_KEY_CHARS)


def parse_options(body: dict[str, Any]) -> RequestOptions:
    refuse_unsupported_with_this_model(body)
    store = body.get("store")
    if store is not None and not isinstance(store, bool):
        raise OpenAIRequestError("'store' must be true or false.", param="store")
    return RequestOptions(
        metadata=parse_metadata(body.get("metadata")),
        store=bool(store),
        service_tier=parse_service_tier(body),
        prompt_cache_key=parse_prompt_cache_key(body),
        safety_identifier=_string(body, "safety_identifier", MAX_USER_CHARS),
    )
