"""Probes of ``/v1`` through client libraries nobody here wrote: litellm, instructor and llama-index's OpenAILike.

Run by ``test_client_libraries_engine.py`` with ``.venv-clients/bin/python`` (scripts/clients-venv.sh: their openai
pins conflict with ``.venv``'s), never imported by the test suite. One probe per call::

    PROBE_BASE_URL=http://127.0.0.1:8000 PROBE_API_KEY=<token> PROBE_MODEL=<name> python client_libraries_probe.py NAME

prints one JSON object with what the library returned (the completion's id, its text, the parsed object...), and
exits non-zero with the library's exception when the call fails.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

BASE_URL = os.environ.get("PROBE_BASE_URL", "")
API_KEY = os.environ.get("PROBE_API_KEY", "")
MODEL = os.environ.get("PROBE_MODEL", "")
V1 = f"{BASE_URL}/v1"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


# -- litellm: the `openai/` provider with an api_base, as its docs say for any OpenAI-compatible server --------------


def litellm_chat() -> dict[str, Any]:
    import litellm

    answer = litellm.completion(
        model=f"openai/{MODEL}", api_base=V1, api_key=API_KEY, messages=QUESTION, max_tokens=8, temperature=0
    )
    choice = answer.choices[0]
    usage = answer.usage
    return {
        "id": answer.id,
        "content": choice.message.content,
        "finish_reason": choice.finish_reason,
        "usage": [usage.prompt_tokens, usage.completion_tokens],
    }


def litellm_stream() -> dict[str, Any]:
    import litellm

    chunks = litellm.completion(
        model=f"openai/{MODEL}",
        api_base=V1,
        api_key=API_KEY,
        messages=QUESTION,
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    ids, text, finish, usage = set(), [], None, None
    for chunk in chunks:
        ids.add(chunk.id)
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        if getattr(chunk, "usage", None):
            usage = [chunk.usage.prompt_tokens, chunk.usage.completion_tokens]
    return {"ids": sorted(ids), "content": "".join(text), "finish_reason": finish, "usage": usage}


def litellm_named_tool() -> dict[str, Any]:
    import litellm

    answer = litellm.completion(
        model=f"openai/{MODEL}",
        api_base=V1,
        api_key=API_KEY,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=48,
        temperature=0,
    )
    call = answer.choices[0].message.tool_calls[0]
    return {"id": answer.id, "name": call.function.name, "arguments": json.loads(call.function.arguments)}


# -- instructor: a pydantic model out of a tool call (its default mode) or out of a JSON schema response format ------


def _instructor_city(mode_name: str) -> dict[str, Any]:
    import instructor
    import openai
    from pydantic import BaseModel, Field

    class City(BaseModel):
        name: str = Field(max_length=20)
        country: str = Field(max_length=20)

    client = instructor.from_openai(
        openai.OpenAI(base_url=V1, api_key=API_KEY, max_retries=0), mode=getattr(instructor.Mode, mode_name)
    )
    city, completion = client.chat.completions.create_with_completion(
        model=MODEL,
        response_model=City,
        messages=[{"role": "user", "content": "Name the capital of France and its country."}],
        max_tokens=64,
        temperature=0,
        max_retries=0,
    )
    return {"id": completion.id, "city": city.model_dump(), "finish_reason": completion.choices[0].finish_reason}


def instructor_tools() -> dict[str, Any]:
    return _instructor_city("TOOLS")


def instructor_json_schema() -> dict[str, Any]:
    return _instructor_city("JSON_SCHEMA")


# -- llama-index: OpenAILike, the class its docs name for OpenAI-compatible servers -------------------------------


def _llama(**options: Any) -> Any:
    from llama_index.llms.openai_like import OpenAILike

    return OpenAILike(
        model=MODEL, api_base=V1, api_key=API_KEY, max_tokens=8, temperature=0, max_retries=0, timeout=120, **options
    )


def llamaindex_chat() -> dict[str, Any]:
    from llama_index.core.llms import ChatMessage

    messages = [
        ChatMessage(role="system", content="Answer briefly."),
        ChatMessage(role="user", content="What is the capital of France?"),
    ]
    answer = _llama(is_chat_model=True).chat(messages)
    return {"id": answer.raw.id, "content": answer.message.content}


def llamaindex_stream_chat() -> dict[str, Any]:
    from llama_index.core.llms import ChatMessage

    chunks = list(_llama(is_chat_model=True).stream_chat([ChatMessage(role="user", content="Hi!")]))
    assert chunks, "no chunk"
    last = chunks[-1]  # each chunk's message holds the text so far
    return {"id": last.raw.id, "content": last.message.content}


def llamaindex_complete() -> dict[str, Any]:
    """``is_chat_model=False``: the prompt goes to ``/v1/completions`` as it is."""
    answer = _llama(is_chat_model=False).complete("The capital of France is")
    return {"id": answer.raw.id, "text": answer.text}


PROBES: dict[str, Callable[[], dict[str, Any]]] = {
    probe.__name__: probe
    for probe in (
        litellm_chat,
        litellm_stream,
        litellm_named_tool,
        instructor_tools,
        instructor_json_schema,
        llamaindex_chat,
        llamaindex_stream_chat,
        llamaindex_complete,
    )
}

if __name__ == "__main__":
    print(json.dumps(PROBES[sys.argv[1]]()))
