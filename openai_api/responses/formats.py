"""The response object of ``/v1/responses`` in OpenAI's shape, built from a :class:`ResponseRecord` and its run.

Item ids are derived from the response id, so a stored response reads back (``GET /v1/responses/{id}``) with the
ids its caller first saw, the function calls' ``call_id`` included (what a ``function_call_output`` answers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openai_api.formats import answered_model
from openai_api.responses.models import ResponseRecord
from openai_api.service_tier import answered_service_tier
from openai_api.tools.calls import tool_calls_from_text
from openai_api.tools.parsing import ToolMode
from runs.models import FinishReason, Run, RunStatus

ID_PREFIX = "resp_"
_IN_PROGRESS = {RunStatus.QUEUED: "queued", RunStatus.STREAMING: "in_progress", RunStatus.CANCELLING: "in_progress"}


def _suffix(record: ResponseRecord) -> str:
    return record.public_id.removeprefix(ID_PREFIX)


def message_id(record: ResponseRecord) -> str:
    return f"msg_{_suffix(record)}"


def call_item_id(record: ResponseRecord, index: int) -> str:
    return f"fc_{_suffix(record)}{index:02x}"


def call_id(record: ResponseRecord, index: int) -> str:
    """OpenAI's shape (``call_`` and 24 characters), fixed per response and index."""
    return f"call_{_suffix(record)[:20]}{index:04x}"


def tool_mode(record: ResponseRecord) -> ToolMode:
    return ToolMode(record.request.get("tool_mode", ToolMode.NONE))


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str


def tool_names(record: ResponseRecord) -> list[str]:
    """The declared function tools' names (a call cut short inside its name is named when they leave one)."""
    return [str(t.get("name")) for t in record.request.get("tools") or [] if isinstance(t, dict)]


def call_format(record: ResponseRecord) -> str:
    """The form of an "auto" call (``openai_api.tools.parsing.ToolRequest.call_format``): ``""`` for the JSON array,
    and for a record stored before the field existed."""
    return str(record.request.get("call_format") or "")


def calls_of(record: ResponseRecord, text: str) -> list[Call]:
    """The function calls an answer holds: a forced tool's, or an "auto" answer that chose a call (it starts with
    ``[``, ``openai_api.tools.grammar``, or ``<`` in the hermes format); empty for a plain answer. A call cut short
    keeps its arguments so far."""
    mode = tool_mode(record)
    if mode not in (ToolMode.NAMED, ToolMode.REQUIRED, ToolMode.AUTO):
        return []
    found = tool_calls_from_text(
        mode, record.request.get("function_name"), text, names=tool_names(record), call_format=call_format(record)
    )
    if not record.request.get("parallel_tool_calls", True):
        found = found[:1]
    return [Call(name=c["function"]["name"], arguments=c["function"]["arguments"]) for c in found]


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(record: ResponseRecord, text: str | None, *, status: str) -> dict[str, Any]:
    content = [] if text is None else [text_part(text)]
    return {"id": message_id(record), "type": "message", "role": "assistant", "status": status, "content": content}


def call_item(record: ResponseRecord, index: int, call: Call, *, status: str) -> dict[str, Any]:
    return {
        "id": call_item_id(record, index),
        "type": "function_call",
        "call_id": call_id(record, index),
        "name": call.name,
        "arguments": call.arguments,
        "status": status,
    }


def output_items(record: ResponseRecord, text: str, *, status: str) -> list[dict[str, Any]]:
    calls = calls_of(record, text)
    if calls:
        return [call_item(record, index, call, status=status) for index, call in enumerate(calls)]
    return [message_item(record, text, status=status)]


def response_status(run: Run) -> str:
    status = RunStatus(run.status)
    if status in _IN_PROGRESS:
        return _IN_PROGRESS[status]
    if status == RunStatus.DONE:
        return "incomplete" if run.finish_reason == FinishReason.LENGTH else "completed"
    return "cancelled" if status == RunStatus.CANCELLED else "failed"


def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def response_object(
    record: ResponseRecord, run: Run, *, text: str | None = None, status: str | None = None
) -> dict[str, Any]:
    """The response as OpenAI shapes it. ``text``: the answer (the run's stored message when None and the run is
    done). ``status``: instead of the run's (``in_progress`` for the first events of a stream)."""
    asked = record.request
    status = status or response_status(run)
    output: list[dict[str, Any]] = []
    if status in ("completed", "incomplete"):
        if text is None:
            text = run.assistant_message.content if run.assistant_message is not None else ""
        output = output_items(record, text, status="incomplete" if status == "incomplete" else "completed")
    finished = run.finished_at if status not in ("queued", "in_progress") else None
    error = None
    if status == "failed":
        error = {"code": "server_error", "message": run.error or "Generation failed."}
    return {
        "id": record.public_id,
        "object": "response",
        "created_at": int(run.created_at.timestamp()),
        "status": status,
        "background": False,
        "completed_at": int(finished.timestamp()) if finished is not None and status == "completed" else None,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": asked.get("instructions"),
        "max_output_tokens": asked.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": answered_model(asked.get("model", run.model), [run]),
        "output": output,
        "parallel_tool_calls": asked.get("parallel_tool_calls", True),
        "previous_response_id": asked.get("previous_response_id"),
        "prompt_cache_key": asked.get("prompt_cache_key"),
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": asked.get("safety_identifier"),
        "service_tier": answered_service_tier(run),
        "store": run.store,
        "temperature": asked.get("temperature"),
        "text": asked.get("text", {"format": {"type": "text"}}),
        "tool_choice": asked.get("tool_choice", "none"),
        "tools": asked.get("tools", []),
        "top_logprobs": 0,
        "top_p": asked.get("top_p"),
        "truncation": asked.get("truncation", "disabled"),
        "usage": usage(run.input_tokens, run.output_tokens) if status in ("completed", "incomplete") else None,
        "user": asked.get("user"),
        "metadata": run.metadata,
    }
