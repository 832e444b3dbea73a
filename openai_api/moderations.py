"""``POST /v1/moderations``: OpenAI's moderation endpoint, answered by this project's moderation backends.

``input``: a string, a list of strings, or a list of multimodal parts of which only ``{"type": "text", "text"}``
is taken (an ``image_url`` part is a 400: no backend here judges images). ``model``: a backend's name (``local``,
``http``, ``guard``), or ``omni-moderation-latest``/``text-moderation-latest`` (and no ``model``), which mean the
configured ``MODERATION_BACKEND``. Every one of OpenAI's thirteen categories is in each result; those the backend
does not judge are ``false`` with a score of ``0.0`` and an empty ``category_applied_input_types`` (docs/moderation.md).

A category flags above ``MODERATION_THRESHOLD``. This endpoint classifies only: no tier policy or allow-list, no
violation recorded, nothing charged against the token bucket.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from moderation.backends import BACKEND_NAMES, CATEGORIES, ModerationResult, ModerationUnavailable, backend_for
from openai_api.apis import _authorized
from openai_api.errors import OpenAIRequestError, from_domain_error, from_request_error
from openai_api.params import refuse_unknown
from openai_api.requests import checked_text, read_body

MODERATION_PARAMS = frozenset({"input", "model"})
DEFAULT_ALIASES = ("omni-moderation-latest", "text-moderation-latest")
"""OpenAI's model names a client sends by default: they mean the configured backend."""


@dataclass(frozen=True)
class ModerationRequest:
    backend: str
    texts: list[str]


def parse_moderation(body: Any, *, max_inputs: int) -> ModerationRequest:
    """The checked request; :class:`OpenAIRequestError` (400, 404 for an unknown model) naming the parameter."""
    if not isinstance(body, dict):
        raise OpenAIRequestError("The body must be a JSON object.")
    refuse_unknown(body, MODERATION_PARAMS)
    return ModerationRequest(backend=_backend(body.get("model")), texts=_texts(body.get("input"), max_inputs))


def _backend(model: Any) -> str:
    if model is None or model in DEFAULT_ALIASES:
        return settings.MODERATION.backend
    if not isinstance(model, str):
        raise OpenAIRequestError("'model' must be a string: a moderation backend's name.", param="model")
    if model not in BACKEND_NAMES:
        known = ", ".join((*BACKEND_NAMES, *DEFAULT_ALIASES))
        raise OpenAIRequestError(
            f"The moderation model {model[:200]!r} does not exist here; use one of {known}.",
            param="model",
            code="model_not_found",
            status=404,
        )
    return model


def _texts(value: Any, max_inputs: int) -> list[str]:
    if value is None:
        raise OpenAIRequestError("'input' is required: a string, a list of strings or of text parts.", param="input")
    if isinstance(value, str):
        return [checked_text(value, "input")]
    if not isinstance(value, list):
        raise OpenAIRequestError("'input' must be a string, a list of strings or a list of text parts.", param="input")
    if not value:
        raise OpenAIRequestError("'input' is empty: send at least one text.", param="input")
    if len(value) > max_inputs:
        raise OpenAIRequestError(
            f"'input' holds {len(value)} items; at most {max_inputs} fit in one request: split it.", param="input"
        )
    if all(isinstance(item, dict) for item in value):
        return [_text_part(part, f"input[{index}]") for index, part in enumerate(value)]
    texts: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise OpenAIRequestError(
                f"'input[{index}]' must be a string (or send every item as a part object).", param=f"input[{index}]"
            )
        texts.append(checked_text(item, f"input[{index}]"))
    return texts


def _text_part(part: dict[str, Any], param: str) -> str:
    kind = part.get("type")
    if kind == "image_url":
        raise OpenAIRequestError(
            f"'{param}' is an image: images are not supported by this server's moderation backends; send text.",
            param=param,
            code="unsupported_input",
        )
    if kind != "text" or not isinstance(part.get("text"), str):
        raise OpenAIRequestError(f'\'{param}\' must be {{"type": "text", "text": <string>}}.', param=param)
    unknown = set(part) - {"type", "text"}
    if unknown:
        raise OpenAIRequestError(f"'{param}' has unknown field(s): {', '.join(sorted(unknown))}.", param=param)
    return checked_text(part["text"], f"{param}.text")


def result_body(result: ModerationResult, *, threshold: float) -> dict[str, Any]:
    """One result in OpenAI's shape: every category, those not judged ``false``/``0.0`` with no input type."""
    scores = {name: float(result.category_scores.get(name, 0.0)) for name in CATEGORIES}
    categories = {name: name in result.category_scores and scores[name] > threshold for name in CATEGORIES}
    applied = {name: ["text"] if name in result.category_scores else [] for name in CATEGORIES}
    return {
        "flagged": any(categories.values()),
        "categories": categories,
        "category_scores": scores,
        "category_applied_input_types": applied,
    }


@csrf_exempt  # bearer tokens only: no cookie is read
async def moderations(request: HttpRequest) -> HttpResponse:
    user = await _authorized(request, "POST")
    if isinstance(user, HttpResponse):
        return user
    try:
        parsed = parse_moderation(read_body(request), max_inputs=settings.MODERATION.max_inputs)
    except OpenAIRequestError as exc:
        return from_request_error(exc)
    try:
        backend = backend_for(parsed.backend)
        # The local model is CPU work (well under 1 ms a text), the HTTP and guard backends block: off the event loop.
        results = await sync_to_async(backend.classify, thread_sensitive=False)(parsed.texts)
    except ModerationUnavailable as exc:
        return from_domain_error(exc)
    threshold = settings.MODERATION.threshold
    return JsonResponse(
        {
            "id": f"modr-{uuid.uuid4().hex}",
            "model": backend.name,
            "results": [result_body(result, threshold=threshold) for result in results],
        }
    )
