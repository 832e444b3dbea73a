"""The sampling parameters shared by ``/v1/chat/completions`` and ``/v1/completions``, read as vLLM reads them.

Each is checked for its type here and for its range by :func:`generation.sampling.check_sampling` (vLLM's own
bounds), so a value vLLM would refuse is a 400 naming the parameter, before anything is written. Every
parameter a body may hold is listed (:data:`SAMPLING_PARAMS` plus each endpoint's own); any other name is a
400 that names it: a parameter is never accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generation.sampling import MAX_TOP_LOGPROBS, SamplingError, SamplingSpec, check_sampling
from openai_api.errors import OpenAIRequestError

MAX_CHOICES = 8
"""``n`` at most: each choice is a run of its own, admitted and charged like any other."""
MAX_USER_CHARS = 256

SAMPLING_PARAMS = frozenset(
    {
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "seed",
        "stop",
        "stop_token_ids",
        "ignore_eos",
        "min_tokens",
        "logit_bias",
        "n",
        "user",
        "stream",
        "stream_options",
        "structured_outputs",
        "constraint",
    }
)
"""Parameters both endpoints take (``logprobs`` differs: a flag plus ``top_logprobs`` for chat, a count for
completions)."""

NOT_SUPPORTED = {
    "use_beam_search": "beam search is not served here",
    "best_of": "each choice is sampled on its own; use 'n'",
    "prompt_logprobs": "prompt log probabilities are not returned by this server",
    "echo": "the prompt is not echoed back by this server",
    "suffix": "this model has no fill-in-the-middle mode",
    "functions": "the legacy 'functions' API is not served; use 'tools'",
    "function_call": "the legacy 'functions' API is not served; use 'tool_choice'",
    "audio": "this model reads and writes text only",
    "modalities": "this model reads and writes text only",
    "prediction": "predicted outputs are not served here",
    "web_search_options": "web search is not served here",
    "allowed_token_ids": "use 'logit_bias' or a registered 'constraint' to restrict tokens",
    "bad_words": "use 'logit_bias' to ban tokens",
    "chat_template": "the deployment's chat template is used",
    "guided_json": "use 'structured_outputs': {'json': ...} or 'response_format'",
    "guided_regex": "use 'structured_outputs': {'regex': ...}",
    "guided_choice": "use 'structured_outputs': {'choice': [...]}",
    "guided_grammar": "use 'structured_outputs': {'grammar': ...}",
    "priority": "priority comes from your tier and fair share, not from the request",
}
"""Names vLLM or OpenAI know that this server does not implement, with what to do instead."""


@dataclass(frozen=True)
class StreamOptions:
    stream: bool
    include_usage: bool
    continuous_usage_stats: bool


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int | None
    spec: SamplingSpec
    n: int
    end_user: str
    stream: StreamOptions


def refuse_unknown(body: dict[str, Any], allowed: frozenset[str]) -> None:
    for name in body:
        if name in allowed:
            continue
        why = NOT_SUPPORTED.get(name)
        if why is not None:
            if body[name] in (None, False, [], {}) and name not in ("priority",):
                continue  # a client sending the default asks for nothing this server lacks
            raise OpenAIRequestError(f"'{name}' is not supported: {why}.", param=name, code="unsupported_parameter")
        raise OpenAIRequestError(
            f"Unknown parameter '{name}'. Remove it, or see the API reference for the parameters this server takes.",
            param=name,
            code="unknown_parameter",
        )


def _number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OpenAIRequestError(f"'{name}' must be a number.", param=name)
    return float(value)


def _integer(body: dict[str, Any], name: str, default: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise OpenAIRequestError(f"'{name}' must be an integer.", param=name)
    return value


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise OpenAIRequestError(f"'{name}' must be true or false.", param=name)
    return value


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise OpenAIRequestError("'stop' must be a string or a list of strings.", param="stop")


def _token_ids(body: dict[str, Any], name: str) -> tuple[int, ...]:
    value = body.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise OpenAIRequestError(f"'{name}' must be a list of token ids (integers).", param=name)
    return tuple(value)


def _logit_bias(body: dict[str, Any]) -> dict[int, float]:
    value = body.get("logit_bias")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OpenAIRequestError("'logit_bias' must be an object mapping token ids to biases.", param="logit_bias")
    out: dict[int, float] = {}
    for key, bias in value.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise OpenAIRequestError(
                f"'logit_bias' keys must be token ids; got {str(key)[:40]!r}.", param="logit_bias"
            ) from None
        if isinstance(bias, bool) or not isinstance(bias, int | float):
            raise OpenAIRequestError(f"'logit_bias' values must be numbers; got {bias!r}.", param="logit_bias")
        out[token] = float(bias)
    return out


def _stream(body: dict[str, Any]) -> StreamOptions:
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is None:
        return StreamOptions(stream=stream, include_usage=False, continuous_usage_stats=False)
    if not isinstance(options, dict):
        raise OpenAIRequestError("'stream_options' must be an object.", param="stream_options")
    if not stream:
        raise OpenAIRequestError("'stream_options' can only be set when 'stream' is true.", param="stream_options")
    unknown = sorted(set(options) - {"include_usage", "continuous_usage_stats"})
    if unknown:
        raise OpenAIRequestError(
            f"Unknown parameter 'stream_options.{unknown[0]}'; it takes include_usage and continuous_usage_stats.",
            param=f"stream_options.{unknown[0]}",
            code="unknown_parameter",
        )
    return StreamOptions(
        stream=True,
        include_usage=_flag(options, "include_usage"),
        continuous_usage_stats=_flag(options, "continuous_usage_stats"),
    )


def parse_sampling(
    body: dict[str, Any],
    *,
    logprobs: int | None,
    logprobs_param: str,
    structured_outputs: dict[str, Any] | None,
    constraint: dict[str, Any] | None,
) -> SamplingParams:
    """The sampling parameters of ``body``; ``logprobs``, ``structured_outputs`` and ``constraint`` are read by
    the caller (their spelling differs per endpoint) and checked here with the rest."""
    max_name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _integer(body, max_name, None)
    if max_tokens is not None and max_tokens < 1:
        raise OpenAIRequestError(f"'{max_name}' must be at least 1; got {max_tokens}.", param=max_name)
    n = _integer(body, "n", 1)
    n = 1 if n is None else n
    if not 1 <= n <= MAX_CHOICES:
        raise OpenAIRequestError(f"'n' must be between 1 and {MAX_CHOICES}; got {n}.", param="n")
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > MAX_USER_CHARS):
        raise OpenAIRequestError(f"'user' must be a string of at most {MAX_USER_CHARS} characters.", param="user")
    spec = SamplingSpec(
        temperature=_number(body, "temperature", 1.0),
        top_p=_number(body, "top_p", 1.0),
        top_k=_integer(body, "top_k", 0) or 0,
        min_p=_number(body, "min_p", 0.0),
        presence_penalty=_number(body, "presence_penalty", 0.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0),
        repetition_penalty=_number(body, "repetition_penalty", 1.0),
        seed=_integer(body, "seed", None),
        stop=_stop(body),
        stop_token_ids=_token_ids(body, "stop_token_ids"),
        ignore_eos=_flag(body, "ignore_eos"),
        min_tokens=_integer(body, "min_tokens", 0) or 0,
        logprobs=logprobs,
        logit_bias=_logit_bias(body),
        structured_outputs=structured_outputs,
        constraint=constraint,
    )
    try:
        check_sampling(spec, max_tokens=max_tokens, names={"logprobs": logprobs_param, "max_tokens": max_name})
    except SamplingError as exc:
        raise OpenAIRequestError(exc.message, param=exc.param) from None
    return SamplingParams(max_tokens=max_tokens, spec=spec, n=n, end_user=user or "", stream=_stream(body))


def chat_logprobs(body: dict[str, Any]) -> int | None:
    """Chat's ``logprobs`` (a flag) and ``top_logprobs`` (how many alternatives), as vLLM checks them."""
    wanted = _flag(body, "logprobs")
    top = _integer(body, "top_logprobs", None)
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise OpenAIRequestError(
            f"'top_logprobs' must be between 0 and {MAX_TOP_LOGPROBS}; got {top}.", param="top_logprobs"
        )
    if top and not wanted:
        raise OpenAIRequestError("'top_logprobs' needs 'logprobs' set to true.", param="top_logprobs")
    return (top or 0) if wanted else None


def completion_logprobs(body: dict[str, Any]) -> int | None:
    """``/v1/completions``' ``logprobs``: how many alternatives per token (0 for the sampled token only)."""
    value = _integer(body, "logprobs", None)
    if value is not None and not 0 <= value <= MAX_TOP_LOGPROBS:
        raise OpenAIRequestError(f"'logprobs' must be between 0 and {MAX_TOP_LOGPROBS}; got {value}.", param="logprobs")
    return value
