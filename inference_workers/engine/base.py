"""The interface every inference engine offers the worker: async generation of deltas, abort, statistics."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from generation.result import EngineFinishReason
from generation.sampling import SamplingSpec


class EngineError(RuntimeError):
    """A request failed in the engine: what ``EngineHost.stream`` raises for any exception of the engine's
    ``generate`` (the run ends failed with this message)."""


class EngineDead(EngineError):
    """The engine cannot serve any request any more (vLLM's engine core died: ``EngineDeadError``).

    The engine raises it from ``generate``; ``EngineHost`` marks itself dead and raises it to the request's task
    thread, and again for every later request, and ``generate_run`` raises it before it touches a run. Unlike an
    error of one request (any other :class:`EngineError`: the run fails), this ends the engine for every run and is
    no run's fault: the worker stops taking runs and its process exits, the runs in flight are requeued by the
    reaper and a run not yet started goes back to the queue (see ``EngineHost`` and ``WorkerRuntime``). Being an
    :class:`EngineError`, it must be caught before one.
    """


WARM_UP_REQUEST_PREFIX = "warm-up-"
"""Request ids of the one generation a worker answers before it heartbeats ready (``WorkerRuntime.warm_up``)."""


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt: str
    max_tokens: int
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    """Everything else the run asks of the sampler (temperature, top_p, stop, seed, logprobs, structured outputs...)."""
    priority: int = 0
    """vLLM semantics: a lower value is served first (``scheduling_policy="priority"``)."""


@dataclass(frozen=True)
class EngineTiming:
    """Where a request's time to first token went inside the engine (vLLM's per-request timestamps).

    ``submit_s``: from the ``generate`` call until the engine core queued it (tokenizing, the hop to the core);
    ``waiting_s``: in vLLM's waiting queue until first scheduled (no free slot, or behind higher priorities);
    ``prefill_s``: from first scheduled to its first token (its prefill chunks and the steps they share);
    ``output_s``: from the core's first token until this process had it (the output path, the event loop);
    ``preemptions``: times vLLM preempted it before its first token (KV-cache pressure).
    """

    submit_s: float
    waiting_s: float
    prefill_s: float
    output_s: float
    preemptions: int = 0

    def as_fields(self) -> dict[str, float | int]:
        """The figures as log fields (``engine_waiting_s``...), rounded to milliseconds."""
        return {
            "engine_submit_s": round(self.submit_s, 3),
            "engine_waiting_s": round(self.waiting_s, 3),
            "engine_prefill_s": round(self.prefill_s, 3),
            "engine_output_s": round(self.output_s, 3),
            "engine_preemptions": self.preemptions,
        }


@dataclass(frozen=True)
class GenerationDelta:
    """New text since the previous delta of the same request (never the cumulative text)."""

    text: str
    new_tokens: int
    prompt_tokens: int | None = None
    """Set on the first delta: the prompt's length in tokens as the engine counted it."""
    finish_reason: EngineFinishReason | None = None
    """Set on the last delta; None before."""
    logprobs: list[dict[str, Any]] | None = None
    """Only when the request asked for them (``SamplingSpec.logprobs``): one JSON-ready entry per new token, in
    OpenAI's shape ``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}`` (see
    ``runs.streaming.contract``)."""
    timing: EngineTiming | None = None
    """Set on the delta that carries the first token, by engines that report it (vLLM)."""

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


MIN_LOGPROB = -9999.0
"""The floor of a reported log probability, as vLLM's OpenAI server clamps it (``-inf`` is not JSON)."""


def _logprob_value(token: str, logprob: float) -> dict[str, Any]:
    value = logprob if logprob == logprob else MIN_LOGPROB  # NaN: a masked-out token
    return {
        "token": token,
        "logprob": max(float(value), MIN_LOGPROB),
        "bytes": list(token.encode("utf-8", errors="replace")),
    }


def logprob_entry(token: str, logprob: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    """One token's entry in OpenAI's shape: the sampled ``token`` and its log probability, with ``top``
    (``(token, logprob)`` pairs, most likely first) as ``top_logprobs``; ``bytes`` are the UTF-8 bytes of the text."""
    entry = _logprob_value(token, logprob)
    entry["top_logprobs"] = [_logprob_value(t, lp) for t, lp in top]
    return entry


@dataclass(frozen=True)
class EngineStats:
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    """Fraction of the KV cache in use, 0..1."""
    tpot_s: float | None = None
    """Recent mean time per output token of running requests, seconds (None: no recent decode)."""
    prefix_cache_queries: int = 0
    """Prompt tokens looked up in the prefix cache since the engine started (vLLM's ``prefix_cache_queries``)."""
    prefix_cache_hits: int = 0
    """Of those, tokens served from the cache (vLLM's ``prefix_cache_hits``); hits / queries is the hit rate."""
    updated_at: float = field(default_factory=time.time)
    """Unix time these figures were measured: vLLM's last iteration (a long step or an idle engine leaves them
    old), now for an engine that computes them on demand. Runs sent after it are not in running/waiting yet."""


class InferenceEngine(Protocol):
    model_name: str
    model_version: str
    max_num_seqs: int

    async def start(self) -> None:
        """Builds the engine; must be awaited on the loop that will drive it, before any ``generate``."""

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        """Yields deltas until (and including) one with a ``finish_reason``."""

    async def abort(self, request_id: str) -> None:
        """Stops a request within one engine step; its stream ends with ``finish_reason="abort"``."""

    def stats(self) -> EngineStats: ...

    async def shutdown(self) -> None: ...


class TpotWindow:
    """Mean of the inter-token latencies seen in the last ``window_s`` seconds."""

    def __init__(self, window_s: float = 5.0) -> None:
        self.window_s = window_s
        self._samples: list[tuple[float, float]] = []

    def add(self, latency_s: float, now: float | None = None) -> None:
        self._samples.append((now if now is not None else time.monotonic(), latency_s))

    def mean(self, now: float | None = None) -> float | None:
        now = now if now is not None else time.monotonic()
        cutoff = now - self.window_s
        self._samples = [s for s in self._samples if s[0] >= cutoff]
        if not self._samples:
            return None
        return sum(latency for _, latency in self._samples) / len(self._samples)
