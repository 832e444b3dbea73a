"""``POST /v1/responses`` bodies, checked by the chat-completions parser they translate into.

The body is read into the chat-completion body it means (``input`` and ``instructions`` as ``messages``,
``max_output_tokens`` as ``max_completion_tokens``, flattened function tools and ``tool_choice`` in chat's nesting,
``text.format`` as ``response_format``, ``safety_identifier``/``user`` as ``user``), which
:func:`openai_api.requests.parse_chat_completion` checks with every rule of ``/v1/chat/completions``; a refusal's
``messages[j]``/``tools[k].function`` paths are named back as the Responses body spells them (``input[i]``,
``tools[k]``, ``text.format``). The Responses-only parameters (``metadata``, ``store``, ``previous_response_id``,
``truncation``) are read here. A parameter OpenAI knows but this model cannot honour (``reasoning``, ``background``,
hosted tools, ``include``...) is a 400 saying so, as OpenAI answers for a model without it; any other name is a 400
``unknown_parameter``. Nothing is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from core.http.text import echo
from openai_api.errors import OpenAIRequestError
from openai_api.options import parse_metadata, parse_prompt_cache_key, parse_service_tier
from openai_api.requests import ChatCompletionRequest, bool_param, parse_chat_completion
from openai_api.responses.input_items import Translated, rename_message_paths, translate_input

TRUNCATIONS = ("disabled", "auto")

SUPPORTED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "metadata",
        "store",
        "previous_response_id",
        "user",
        "safety_identifier",
        "stream",
        "stream_options",
        "truncation",
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
    }
)
DEFAULT_OK: dict[str, tuple[Any, ...]] = {
    "reasoning": (None, {}),
    "background": (None, False),
    "include": (None, []),
    "top_logprobs": (None, 0),
    "max_tool_calls": (None,),
    "prompt": (None,),
    "conversation": (None,),
    "context_management": (None, []),
    "moderation": (None,),
    "background_options": (None,),
    "prompt_cache_options": (None,),
    "access_programs": (None,),
    "image": (None,),
}
"""OpenAI parameters this model cannot honour: accepted only with the value that asks for nothing."""
REASONING_FIELDS = ("effort", "summary", "generate_summary")
FUNCTION_TOOL_KEYS = ("name", "description", "parameters", "strict")


def unsupported(param: str) -> OpenAIRequestError:
    """OpenAI's answer for a parameter the model does not have."""
    return OpenAIRequestError(
        f"Unsupported parameter: '{param}' is not supported with this model.", param=param, code="unsupported_parameter"
    )


@dataclass(frozen=True)
class PreviousOutput:
    """What the continued response answered: its text, or its function calls ``(call_id, name, arguments)``."""

    text: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        if self.calls:
            tool_calls = [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                for call_id, name, arguments in self.calls
            ]
            return {"role": "assistant", "content": None, "tool_calls": tool_calls}
        return {"role": "assistant", "content": self.text}


@dataclass(frozen=True)
class ResponseRequest:
    chat: ChatCompletionRequest
    """The call as a chat completion: ``history`` starts with the previous output's turn when one is continued."""
    echo: dict[str, Any]
    """The request's fields the response object repeats (instructions, tools, tool_choice, text, ...)."""
    metadata: dict[str, str]
    store: bool
    previous_response_id: str | None
    truncation: str
    input: str | list[Any] = ""
    """``input`` as sent (checked)."""
    continues: bool = False
    instructions: str | None = None
    """``instructions`` as sent: the chat's first message, a system one (``chat.history[0]`` when given)."""
    service_tier: str | None = None
    """As sent; mapped onto the user's tiers as on chat completions (``openai_api.service_tier``)."""
    prompt_cache_key: str = ""
    """As sent; feeds chat affinity as on chat completions (``runs.selectors.prompt_cache_key_worker``)."""

    @property
    def stream(self) -> bool:
        return self.chat.stream

    @property
    def conversation(self) -> list[tuple[str, str]]:
        """The turns before the last message after the instructions: the continued output first, then the input's."""
        return self.chat.history[1:] if self.instructions is not None else list(self.chat.history)

    @property
    def new_history(self) -> list[tuple[str, str]]:
        """The turns of this request's own input before its last message (the continued output left out)."""
        return self.conversation[1:] if self.continues else self.conversation


def _refuse_unknown(body: dict[str, Any]) -> None:
    for name, value in body.items():
        if name in SUPPORTED:
            continue
        if name in DEFAULT_OK:
            if name == "reasoning" and isinstance(value, dict):
                for key in REASONING_FIELDS:
                    if value.get(key) is not None:
                        raise unsupported(f"reasoning.{key}")
                if set(value) - set(REASONING_FIELDS):
                    raise unsupported("reasoning")
                continue
            if any(value == ok and type(value) is type(ok) for ok in DEFAULT_OK[name] if ok is not None):
                continue
            if value is None:
                continue
            raise unsupported(name)
        raise OpenAIRequestError(
            f"Unknown parameter: '{name}'. Remove it, or see the API reference for the parameters this server takes.",
            param=name,
            code="unknown_parameter",
        )


def previous_response_param(body: Any) -> str | None:
    """``previous_response_id`` as sent (its response is looked up before the rest is parsed)."""
    if not isinstance(body, dict):
        raise OpenAIRequestError("The body must be a JSON object.")
    value = body.get("previous_response_id")
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise OpenAIRequestError("'previous_response_id' must be a response id string.", param="previous_response_id")
    return value


def _tools(value: Any) -> list[Any]:
    """Flattened function tools (``{"type": "function", "name", "parameters", ...}``) in chat's nesting."""
    if not isinstance(value, list):
        raise OpenAIRequestError("'tools' must be a list of function tools.", param="tools")
    out: list[Any] = []
    for index, tool in enumerate(value):
        param = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise OpenAIRequestError(f'\'{param}\' must be an object {{"type": "function", "name": ...}}.', param=param)
        kind = tool.get("type")
        if kind != "function":
            raise OpenAIRequestError(
                f"Tool type {echo(kind)} ('{param}.type') is not supported with this model: only function tools are.",
                param=f"{param}.type",
                code="unsupported_parameter",
            )
        unknown = sorted(set(tool) - {"type", *FUNCTION_TOOL_KEYS})
        if unknown:
            raise OpenAIRequestError(
                f"Unknown parameter: '{param}.{unknown[0]}'.", param=f"{param}.{unknown[0]}", code="unknown_parameter"
            )
        function = {key: tool[key] for key in FUNCTION_TOOL_KEYS if tool.get(key) is not None}
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value  # "none", "auto", "required": chat's own; anything else is refused there
    if isinstance(value, dict) and value.get("type") == "function":
        name = value.get("name")
        if set(value) - {"type", "name"} or not isinstance(name, str):
            raise OpenAIRequestError(
                'A named \'tool_choice\' is {"type": "function", "name": "my_function"}.', param="tool_choice"
            )
        return {"type": "function", "function": {"name": name}}
    kind = value.get("type") if isinstance(value, dict) else None
    raise OpenAIRequestError(
        f"'tool_choice' {echo(kind or value)} is not supported with this model: use 'none', 'auto', 'required' or "
        '{"type": "function", "name": ...}.',
        param="tool_choice",
        code="unsupported_parameter",
    )


def _text_format(value: Any) -> dict[str, Any] | None:
    """``text`` (``{format, verbosity}``) as chat's ``response_format``."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise OpenAIRequestError("'text' must be an object {format, verbosity?}.", param="text")
    unknown = sorted(set(value) - {"format", "verbosity"})
    if unknown:
        raise OpenAIRequestError(
            f"Unknown parameter: 'text.{unknown[0]}'.", param=f"text.{unknown[0]}", code="unknown_parameter"
        )
    if value.get("verbosity") not in (None, "medium"):
        raise unsupported("text.verbosity")
    spec = value.get("format")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise OpenAIRequestError("'text.format' must be an object with a 'type'.", param="text.format")
    if spec.get("type") != "json_schema":
        return spec  # text, json_object: chat's shape already; other types are refused there
    inner = {key: item for key, item in spec.items() if key != "type"}
    return {"type": "json_schema", "json_schema": inner}


def _options(body: dict[str, Any]) -> None:
    """The accepted parameters that change nothing here, checked for what they may be."""
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict) or set(options) - {"include_obfuscation"}:
            raise OpenAIRequestError("'stream_options' takes only 'include_obfuscation'.", param="stream_options")
        if body.get("stream") is not True:
            raise OpenAIRequestError("'stream_options' can only be set when 'stream' is true.", param="stream_options")
    if body.get("prompt_cache_retention") not in (None, "in_memory"):
        raise unsupported("prompt_cache_retention")
    for name in ("user", "safety_identifier"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise OpenAIRequestError(f"'{name}' must be a string.", param=name)


_CHAT_NAMES = [
    (re.compile(r"max_completion_tokens"), "max_output_tokens"),
    (re.compile(r"response_format\.json_schema"), "text.format"),
    (re.compile(r"response_format"), "text.format"),
    (re.compile(r"(tools\[\d+\])\.function"), r"\1"),
    (re.compile(r"tool_choice\.function\.name"), "tool_choice.name"),
    (re.compile(r"'user'"), "'safety_identifier'"),
]


def _renamed(exc: OpenAIRequestError, translated: Translated, *, renamed_user: bool) -> OpenAIRequestError:
    def rename(text: str) -> str:
        text = rename_message_paths(text, translated)
        for pattern, new in _CHAT_NAMES:
            if new == "'safety_identifier'" and not renamed_user:
                continue
            text = pattern.sub(new, text)
        return text

    param = rename(f"'{exc.param}'").strip("'") if exc.param else None
    return OpenAIRequestError(rename(exc.message), param=param, code=exc.code, status=exc.status)


def _echo(body: dict[str, Any], chat: ChatCompletionRequest) -> dict[str, Any]:
    text = body.get("text") or {}
    tool_choice = body.get("tool_choice")
    if tool_choice is None:
        tool_choice = "auto" if body.get("tools") else "none"
    return {
        "model": chat.model,
        "previous_response_id": body.get("previous_response_id"),
        "truncation": body.get("truncation") or "disabled",
        "instructions": body.get("instructions"),
        "tools": body.get("tools") or [],
        "tool_choice": tool_choice,
        "text": {"format": text.get("format") or {"type": "text"}, "verbosity": text.get("verbosity") or "medium"},
        "parallel_tool_calls": chat.tools.parallel_tool_calls,
        "max_output_tokens": body.get("max_output_tokens"),
        "temperature": chat.sampling.spec.temperature,
        "top_p": chat.sampling.spec.top_p,
        "user": body.get("user"),
        "safety_identifier": body.get("safety_identifier"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "service_tier": "default",
        "tool_mode": str(chat.tools.mode),
        "function_name": chat.tools.function_name,
        "call_format": chat.tools.call_format,
    }


def parse_response_create(body: Any, *, previous: PreviousOutput | None = None) -> ResponseRequest:
    """The checked request; ``previous``: the output of ``previous_response_id``'s response (looked up first)."""
    if not isinstance(body, dict):
        raise OpenAIRequestError("The body must be a JSON object.")
    _refuse_unknown(body)
    _options(body)
    if "input" not in body:
        raise OpenAIRequestError("'input' is required: a string or a list of input items.", param="input")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise OpenAIRequestError("'instructions' must be a string.", param="instructions")
    truncation = body.get("truncation") or "disabled"
    if truncation not in TRUNCATIONS:
        raise OpenAIRequestError(
            f"'truncation' must be 'auto' or 'disabled'; got {echo(truncation)}.", param="truncation"
        )
    translated = Translated()
    if instructions is not None:
        translated.add({"role": "system", "content": instructions}, "instructions")
    if previous is not None:
        translated.add(previous.message(), "previous_response_id")
    translate_input(body["input"], translated)
    chat_body: dict[str, Any] = {"model": body.get("model"), "messages": translated.messages}
    for name in ("temperature", "top_p", "parallel_tool_calls", "stream"):
        if body.get(name) is not None:
            chat_body[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat_body["max_completion_tokens"] = body["max_output_tokens"]
    end_user = body.get("safety_identifier") or body.get("user")
    if end_user is not None:
        chat_body["user"] = end_user
    if body.get("tools") is not None:
        tools = _tools(body["tools"])
        if tools:  # an empty list asks for no tools (openai-agents sends one); chat completions refuses it
            chat_body["tools"] = tools
    tool_choice = _tool_choice(body.get("tool_choice"))
    if tool_choice is not None:
        chat_body["tool_choice"] = tool_choice
    response_format = _text_format(body.get("text"))
    if response_format is not None:
        chat_body["response_format"] = response_format
    try:
        chat = parse_chat_completion(chat_body)
    except OpenAIRequestError as exc:
        raise _renamed(exc, translated, renamed_user=body.get("safety_identifier") is not None) from None
    return ResponseRequest(
        chat=chat,
        echo=_echo(body, chat),
        metadata=parse_metadata(body.get("metadata")),
        store=bool_param(body, "store", True),
        previous_response_id=body.get("previous_response_id"),
        truncation=truncation,
        input=body["input"],
        continues=previous is not None,
        instructions=instructions,
        service_tier=parse_service_tier(body),
        prompt_cache_key=parse_prompt_cache_key(body),
    )
