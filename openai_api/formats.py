"""OpenAI's response shapes: ``chat.completion`` and its chunks, ``text_completion`` and its chunks, usage.

A call of ``n`` choices is ``n`` runs; choice ``i`` is ``runs[i]``. The usage adds up every choice's output;
the prompt is counted once per distinct prompt (a chat call has one; ``/v1/completions`` one per string), as
vLLM's server counts it. Log probabilities are carried in the stream in chat's shape
(``runs.streaming.contract``) and converted here for ``/v1/completions``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from deployments.selection import AUTO_MODEL, deployment_by_id
from openai_api.service_tier import answered_service_tier
from openai_api.streaming import Completion, Piece
from runs.models import Run


def frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def error_frame(error: dict[str, str]) -> bytes:
    return frame({"error": {"message": error["message"], "type": "server_error", **error}})


def first_error(completions: Sequence[Completion]) -> dict[str, str] | None:
    return next((c.error for c in completions if c.error is not None), None)


def _usage(completions: Sequence[Completion], *, prompts: int, so_far: bool) -> dict[str, int]:
    """``prompts``: how many distinct prompts the call had (choice ``i`` answers prompt ``i // n``), each counted
    once. ``so_far``: the tokens streamed until now (``stream_options.continuous_usage_stats``), else the runs'
    final counts (the tokens streamed for a run whose end carried none)."""
    per_prompt = max(1, len(completions) // max(1, prompts))
    prompt_tokens = sum(c.prompt_tokens for i, c in enumerate(completions) if i % per_prompt == 0)
    completion_tokens = sum(
        max(c.tokens, c.completion_tokens) if so_far else (c.completion_tokens or c.tokens) for c in completions
    )
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def usage(completions: Sequence[Completion], *, prompts: int = 1) -> dict[str, int]:
    return _usage(completions, prompts=prompts, so_far=False)


def running_usage(completions: Sequence[Completion], *, prompts: int = 1) -> dict[str, int]:
    return _usage(completions, prompts=prompts, so_far=True)


CHAT = "chat.completion"
CHAT_CHUNK = "chat.completion.chunk"
TEXT = "text_completion"
_ID_PREFIX = {CHAT: "chatcmpl", CHAT_CHUNK: "chatcmpl", TEXT: "cmpl"}


def envelope(runs: Sequence[Run], model: str, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    """The fields every OpenAI answer and chunk of a call shares: its id (``chatcmpl-``/``cmpl-`` and the first
    run's id), ``object`` (``kind``), ``created``, ``model``; then ``choices``; a chat's ``service_tier``."""
    body: dict[str, Any] = {
        "id": f"{_ID_PREFIX[kind]}-{runs[0].pk}",
        "object": kind,
        "created": int(runs[0].created_at.timestamp()),
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
    }
    if kind != TEXT:  # chat answers name the tier that served them, as OpenAI's do (openai_api.service_tier)
        body["service_tier"] = answered_service_tier(runs[0])
    return body


def usage_chunk(runs: Sequence[Run], model: str, kind: str, usage_figures: dict[str, int]) -> dict[str, Any]:
    """The last chunk of a stream with ``stream_options.include_usage``: no choices, the call's usage."""
    return {**envelope(runs, model, kind, []), "usage": usage_figures}


# Chat ------------------------------------------------------------------------------------------------------------


def chat_chunk(
    runs: Sequence[Run], model: str, *, index: int, delta: dict[str, Any], logprobs: Any = None, finish: str | None
) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    return envelope(runs, model, CHAT_CHUNK, [choice])


def chat_logprobs(entries: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    return None if entries is None else {"content": entries, "refusal": None}


def chat_body(
    runs: Sequence[Run],
    model: str,
    *,
    messages: Sequence[dict[str, Any]],
    completions: Sequence[Completion],
    finish_reasons: Sequence[str | None],
    logprobs: bool,
) -> dict[str, Any]:
    choices = [
        {
            "index": index,
            "message": message,
            "logprobs": chat_logprobs(completion.logprobs) if logprobs else None,
            "finish_reason": finish,
        }
        for index, (message, completion, finish) in enumerate(zip(messages, completions, finish_reasons, strict=True))
    ]
    return {**envelope(runs, model, CHAT, choices), "usage": usage(completions)}


# Text completions ------------------------------------------------------------------------------------------------


def completion_logprobs(entries: list[dict[str, Any]], *, offset: int) -> dict[str, Any]:
    """Chat-shaped entries as ``/v1/completions``' ``{tokens, token_logprobs, top_logprobs, text_offset}``;
    ``offset`` is where the first token starts in the choice's text."""
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top: list[dict[str, float]] = []
    offsets: list[int] = []
    for entry in entries:
        token = str(entry.get("token", ""))
        tokens.append(token)
        token_logprobs.append(float(entry.get("logprob", 0.0)))
        alternatives = {str(alt["token"]): float(alt["logprob"]) for alt in entry.get("top_logprobs", [])}
        top.append(alternatives)
        offsets.append(offset)
        offset += len(token)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets}


def text_chunk(
    runs: Sequence[Run], model: str, *, index: int, piece: Piece | None, offset: int, logprobs: bool, finish: str | None
) -> dict[str, Any]:
    choice = {
        "index": index,
        "text": piece.text if piece is not None else "",
        "logprobs": completion_logprobs(piece.logprobs, offset=offset) if logprobs and piece is not None else None,
        "finish_reason": finish,
    }
    return envelope(runs, model, TEXT, [choice])


def text_body(
    runs: Sequence[Run],
    model: str,
    *,
    texts: Sequence[str],
    completions: Sequence[Completion],
    logprobs: bool,
    prompts: int,
) -> dict[str, Any]:
    choices = [
        {
            "index": index,
            "text": text,
            "logprobs": completion_logprobs(completion.logprobs, offset=0) if logprobs else None,
            "finish_reason": completion.finish_reason,
        }
        for index, (text, completion) in enumerate(zip(texts, completions, strict=True))
    ]
    return {**envelope(runs, model, TEXT, choices), "usage": usage(completions, prompts=prompts)}


def answered_model(asked: str, runs: Sequence[Run]) -> str:
    """The answer's ``model``: as sent, as vLLM's server echoes it; for ``auto``, the ``name@version`` the router
    picked (the first choice's: every choice of a call is routed alike)."""
    if asked.strip().lower() != AUTO_MODEL or not runs:
        return asked
    served = deployment_by_id(runs[0].deployment_id)
    return served.key if served is not None else runs[0].model
