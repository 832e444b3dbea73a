"""``POST /v1/chat/completions`` bodies: parsed and checked, with a message naming the parameter to fix.

Accepted as OpenAI documents them: ``model``, ``messages`` (roles ``system``/``developer``, ``user``,
``assistant``; content as a string or a list of ``{"type": "text", "text"}`` parts), ``stream``,
``stream_options.include_usage``, ``max_tokens`` / ``max_completion_tokens``, ``temperature``, ``top_p``,
``n`` (1 only). Parameters that would change the answer and that this server does not implement (tools,
``stop``, ``logprobs``, a JSON ``response_format``, penalties, ``logit_bias``) are refused with a 400 instead
of being ignored; those that change nothing here (``user``, ``seed``, ``metadata``, ``store``...) are ignored.

The body itself is read within the bounds of ``core.json_body`` (size 413, nesting depth 400), and every text
that would be stored is checked for what Postgres cannot hold (a NUL, a lone surrogate: ``core.text``), with
the parameter named (``messages[1].content``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

from core.json_body import JsonBodyError, parse_json, too_large
from core.text import text_problem
from openai_api.errors import OpenAIRequestError
from runs.services import SamplingRequest

SYSTEM_ROLES = ("system", "developer")
TURN_ROLES = ("user", "assistant")


@dataclass(frozen=True)
class ChatCompletionRequest:
    model: str
    system_prompt: str | None
    """The request's system/developer messages joined; None when it has none (the server's default applies)."""
    history: list[tuple[str, str]]
    """``(role, content)`` of the user/assistant turns before the last message."""
    prompt: str
    """The last message: the user's."""
    stream: bool
    include_usage: bool
    sampling: SamplingRequest


def read_body(request: HttpRequest) -> Any:
    """The request's JSON value (None for an empty body); :class:`OpenAIRequestError` when the body is too
    large (413), nested too deeply or not JSON (400)."""
    try:
        try:
            raw = request.body  # Django refuses more than DATA_UPLOAD_MAX_MEMORY_SIZE here
        except RequestDataTooBig:
            raise too_large() from None
        return parse_json(raw or b"null", invalid_code="invalid_json")
    except JsonBodyError as exc:
        raise OpenAIRequestError(exc.message, code=exc.code, status=exc.status_code) from None


def _checked(text: str, param: str) -> str:
    problem = text_problem(text)
    if problem is not None:
        raise OpenAIRequestError(f"'{param}' {problem}", param=param, code="invalid_text")
    return text


def _number(body: dict[str, Any], name: str, *, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OpenAIRequestError(f"'{name}' must be a number.", param=name)
    if not low <= value <= high:
        raise OpenAIRequestError(f"'{name}' must be between {low:g} and {high:g}; got {value}.", param=name)
    return float(value)


def _text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return _checked(content, param)
    if isinstance(content, list):
        parts: list[str] = []
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise OpenAIRequestError(
                    f'\'{param}[{index}]\' must be a text part {{"type": "text", "text": "..."}}: this model reads '
                    "text only.",
                    param=f"{param}[{index}]",
                )
            parts.append(_checked(part["text"], f"{param}[{index}].text"))
        return "".join(parts)
    raise OpenAIRequestError(f"'{param}' must be a string or a list of text parts.", param=param)


def _refuse_unsupported(body: dict[str, Any]) -> None:
    def present(name: str) -> bool:
        value = body.get(name)
        return value not in (None, [], {}, "", False, 0)

    for name in ("tools", "functions", "logit_bias", "top_logprobs", "audio", "prediction"):
        if present(name):
            raise OpenAIRequestError(f"'{name}' is not supported by this server.", param=name)
    if body.get("tool_choice") not in (None, "none"):
        raise OpenAIRequestError("'tool_choice' is not supported by this server (no tools).", param="tool_choice")
    if body.get("function_call") not in (None, "none"):
        raise OpenAIRequestError("'function_call' is not supported by this server.", param="function_call")
    if body.get("logprobs"):
        raise OpenAIRequestError("'logprobs' is not supported by this server.", param="logprobs")
    if present("stop"):
        raise OpenAIRequestError("'stop' sequences are not supported by this server.", param="stop")
    for name in ("presence_penalty", "frequency_penalty"):
        if present(name):
            raise OpenAIRequestError(f"'{name}' is not supported by this server; leave it at 0.", param=name)
    response_format = body.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict) or response_format.get("type") != "text"):
        raise OpenAIRequestError("Only the 'text' response_format is supported.", param="response_format")
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise OpenAIRequestError("'n' must be 1: one choice per request.", param="n")


def parse_chat_completion(body: Any) -> ChatCompletionRequest:
    if not isinstance(body, dict):
        raise OpenAIRequestError("The body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIRequestError("'model' is required: the served model's name (see GET /v1/models).", param="model")
    _refuse_unsupported(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIRequestError("'messages' must be a non-empty list of {role, content}.", param="messages")
    system: list[str] = []
    turns: list[tuple[str, str]] = []
    limit = settings.CHAT_LIMITS.max_content_chars
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            raise OpenAIRequestError(f"'{param}' must be an object with 'role' and 'content'.", param=param)
        role = message.get("role")
        content = _text(message.get("content"), f"{param}.content")
        if len(content) > limit:
            raise OpenAIRequestError(
                f"'{param}.content' is {len(content)} characters long; the limit is {limit}.", param=f"{param}.content"
            )
        if role in SYSTEM_ROLES:
            if turns:
                raise OpenAIRequestError(
                    f"'{param}': system/developer messages must come before the conversation.", param=param
                )
            system.append(content)
        elif role in TURN_ROLES:
            turns.append((str(role), content))
        else:
            raise OpenAIRequestError(
                f"'{param}.role' must be one of system, developer, user, assistant; got {role!r}.",
                param=f"{param}.role",
            )
    if not turns or turns[-1][0] != "user":
        raise OpenAIRequestError("The last message must be the user's.", param=f"messages[{len(messages) - 1}]")
    if not turns[-1][1].strip():
        raise OpenAIRequestError(
            "The last user message must not be empty.", param=f"messages[{len(messages) - 1}].content"
        )
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens_param = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise OpenAIRequestError(f"'{max_tokens_param}' must be a positive integer.", param=max_tokens_param)
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise OpenAIRequestError("'stream' must be true or false.", param="stream")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise OpenAIRequestError("'stream_options' must be an object.", param="stream_options")
    temperature = _number(body, "temperature", low=0.0, high=2.0)
    top_p = _number(body, "top_p", low=0.01, high=1.0)
    return ChatCompletionRequest(
        model=model,
        system_prompt="\n\n".join(system) if system else None,
        history=turns[:-1],
        prompt=turns[-1][1],
        stream=bool(stream),
        include_usage=bool(stream_options.get("include_usage")),
        sampling=SamplingRequest(
            max_tokens=max_tokens,
            temperature=1.0 if temperature is None else temperature,
            top_p=1.0 if top_p is None else top_p,
        ),
    )
