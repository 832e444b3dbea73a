"""The real engine: one vLLM V1 ``AsyncLLM`` with continuous batching, prefix caching and priority scheduling."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from core.config import EngineConfig

# vllm itself is imported inside the methods that need it: importing it takes seconds and pulls in torch, and
# the web tier, the dispatcher and the simulated-engine tests import this module without ever building an engine.
from generation.result import EngineFinishReason
from generation.sampling import MAX_TOP_LOGPROBS
from inference_workers.engine.base import (
    MIN_LOGPROB,
    EngineDead,
    EngineStats,
    EngineTiming,
    GenerationDelta,
    GenerationRequest,
    TpotWindow,
    logprob_entry,
)
from inference_workers.engine.constraints import engine_logits_processors
from inference_workers.engine.lifeline import reap_orphaned_engines, tied_children

logger = logging.getLogger(__name__)


CPU_STEP_TOKEN_BUDGET = 256
"""vLLM's per-step token budget on CPU hosts when ``ENGINE_MAX_NUM_BATCHED_TOKENS`` is 0: a flood's prefills in one
step no longer stretch it for seconds (measured with ``bench/fairness_bench.py``: a light user's TTFT p99 under a
10x flood 5.9 s at vLLM's 2048, 1.8 s at 256, the flood's throughput unchanged)."""


def step_token_budget(config: EngineConfig) -> int | None:
    """The ``max_num_batched_tokens`` the engine runs with: the configured one; 0 means
    :data:`CPU_STEP_TOKEN_BUDGET` on a CPU build of vLLM and vLLM's own default (None) elsewhere."""
    if config.max_num_batched_tokens > 0:
        return config.max_num_batched_tokens
    from vllm.platforms import current_platform

    return CPU_STEP_TOKEN_BUDGET if current_platform.is_cpu() else None


def model_version(model_path: str) -> str:
    """A short digest of the model folder's config (changes when other weights are prepared there)."""
    config = Path(model_path) / "config.json"
    if not config.is_file():
        return "unknown"
    return hashlib.sha256(config.read_bytes()).hexdigest()[:12]


class _StatsSink:
    """Receives vLLM's per-iteration statistics (through :func:`_make_stat_logger`)."""

    def __init__(self) -> None:
        self.running = 0
        self.waiting = 0
        self.kv_cache_usage = 0.0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.tpot = TpotWindow()
        self.updated_at = time.time()
        """The figures count the requests submitted before this time: the start of the step they describe."""
        self.last_step_at = self.updated_at
        """When the previous step's figures arrived (about when the step after it began)."""

    def snapshot(self) -> EngineStats:
        return EngineStats(
            running=self.running,
            waiting=self.waiting,
            kv_cache_usage=self.kv_cache_usage,
            tpot_s=self.tpot.mean(),
            prefix_cache_queries=self.prefix_cache_queries,
            prefix_cache_hits=self.prefix_cache_hits,
            updated_at=self.updated_at,
        )


def _make_stat_logger(sink: _StatsSink) -> Any:
    from vllm.v1.metrics.loggers import StatLoggerBase

    class SinkStatLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            if scheduler_stats is not None:
                sink.running = scheduler_stats.num_running_reqs
                sink.waiting = scheduler_stats.num_waiting_reqs + scheduler_stats.num_skipped_waiting_reqs
                sink.kv_cache_usage = scheduler_stats.kv_cache_usage
                # Per-iteration deltas; summed the way vLLM's own Prometheus counters sum them.
                prefix = scheduler_stats.prefix_cache_stats
                sink.prefix_cache_queries += prefix.queries
                sink.prefix_cache_hits += prefix.hits
                # vLLM takes in new requests between steps: these figures (made at the end of a step) count those
                # submitted before the step began, about when the previous step's figures arrived, not later ones.
                now = time.time()
                sink.updated_at, sink.last_step_at = sink.last_step_at, now
            if iteration_stats is not None:
                for latency in iteration_stats.inter_token_latencies_iter:
                    sink.tpot.add(latency)

        def log_engine_initialized(self) -> None:
            pass

    return SinkStatLogger


class VllmEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.model_name = config.served_model_name
        self.model_version = model_version(config.model_path)
        self.max_num_seqs = config.max_num_seqs
        self._sink = _StatsSink()
        self._llm: Any = None
        self._logits_processors: list[str] = []
        """The batch-level constraint processors this engine runs (none where vLLM cannot run them)."""

    async def start(self) -> None:
        # vLLM reads its CPU KV-cache size from the environment; this is the one place we set it.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.config.kv_cache_space_gib))
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self._logits_processors = engine_logits_processors()

        cfg = self.config
        budget = step_token_budget(cfg)
        ours: dict[str, Any] = dict(
            model=cfg.model_path,
            served_model_name=cfg.served_model_name,
            dtype=cfg.dtype,  # type: ignore[arg-type]
            max_num_seqs=cfg.max_num_seqs,
            max_model_len=cfg.max_model_len,
            enforce_eager=cfg.enforce_eager,
            enable_prefix_caching=cfg.enable_prefix_caching,
            scheduling_policy="priority",
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            disable_log_stats=False,
            logits_processors=self._logits_processors,  # type: ignore[arg-type]
            max_logprobs=MAX_TOP_LOGPROBS,
            structured_outputs_config=StructuredOutputsConfig(backend=cfg.structured_outputs_backend),  # type: ignore[arg-type]
            max_num_batched_tokens=budget,  # None: vLLM's default
        )
        # The deployment's own engine arguments go to vLLM as they are (tensor_parallel_size, quantization...).
        args = AsyncEngineArgs(**{**ours, **cfg.engine_args})
        logger.info(
            "building vLLM engine: %s",
            json.dumps({"model": cfg.model_path, "dtype": args.dtype, "engine_args": cfg.engine_args}, default=str),
        )
        # An engine left by a worker killed before these guards (or in the race they leave) goes first; then
        # vLLM's engine core and its workers are started tied to this process (see lifeline's doc).
        reap_orphaned_engines()
        with tied_children():
            self._llm = AsyncLLM.from_engine_args(args, stat_loggers=[_make_stat_logger(self._sink)])

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        """Deltas of one request; raises :class:`EngineDead` when vLLM's engine core has died (every request
        fails then), any other exception for a failure of this request alone (one vLLM refused, say)."""
        from vllm.v1.engine.exceptions import EngineDeadError

        if request.sampling.constraint is not None and not self._logits_processors:
            # Never an unconstrained answer to a constrained request: the run fails and says why.
            raise ValueError(
                "constraints are not enforced by this engine (vLLM's V2 model runner cannot run batch-level logits "
                "processors; the worker needs VLLM_USE_V2_MODEL_RUNNER=0)"
            )
        params = sampling_params(request)
        top_k = request.sampling.logprobs
        first = True
        timed = False
        submitted = time.monotonic()
        try:
            async for output in self._llm.generate(
                request.prompt, params, request.request_id, priority=request.priority
            ):
                completion = output.outputs[0]
                finish = _finish_reason(completion.finish_reason) if output.finished else None
                timing = None
                if not timed and completion.token_ids:
                    timed = True
                    timing = engine_timing(output.metrics, submitted=submitted, received=time.monotonic())
                yield GenerationDelta(
                    text=completion.text,
                    new_tokens=len(completion.token_ids),
                    prompt_tokens=len(output.prompt_token_ids or []) if first else None,
                    finish_reason=finish,
                    logprobs=None if top_k is None else openai_logprobs(completion, top_k),
                    timing=timing,
                )
                first = False
        except EngineDeadError as exc:
            raise EngineDead(f"vLLM's engine core died: {exc}") from exc
        except Exception as exc:
            if self._llm is not None and self._llm.errored:  # the request's error was the engine's death
                raise EngineDead(f"vLLM's engine core died: {type(exc).__name__}: {exc}") from exc
            raise

    async def abort(self, request_id: str) -> None:
        await self._llm.abort(request_id)

    def stats(self) -> EngineStats:
        return self._sink.snapshot()

    async def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None


def engine_timing(stats: Any, *, submitted: float, received: float) -> EngineTiming | None:
    """The request's :class:`EngineTiming` from vLLM's ``RequestStateStats`` (``RequestOutput.metrics``), whose
    ``queued_ts``/``scheduled_ts``/``first_token_ts`` are the engine core's ``time.monotonic()``: the same clock
    as this process's on one host. None when vLLM reports none (stats logging off) or not all three yet."""
    if stats is None:
        return None
    queued, scheduled, first = (getattr(stats, k, 0.0) for k in ("queued_ts", "scheduled_ts", "first_token_ts"))
    if not (queued and scheduled and first):
        return None
    return EngineTiming(
        submit_s=max(0.0, queued - submitted),
        waiting_s=max(0.0, scheduled - queued),
        prefill_s=max(0.0, first - scheduled),
        output_s=max(0.0, received - first),
        preemptions=int(getattr(stats, "num_preemptions", 0)),
    )


def _finish_reason(reason: str | None) -> EngineFinishReason:
    """vLLM's finish reason of a finished output: none means it was aborted; one we do not know ends like a stop."""
    if reason is None:
        return EngineFinishReason.ABORT
    try:
        return EngineFinishReason(reason)
    except ValueError:
        return EngineFinishReason.STOP


def sampling_params(request: GenerationRequest) -> Any:
    """The request's ``vllm.SamplingParams``: every field of its :class:`SamplingSpec`, deltas as output.

    Built with ``SamplingParams.from_optional`` as vLLM's own OpenAI server builds them (logit_bias clamped to
    [-100, 100]). ``structured_outputs`` holds one constraint; a flag that is off (``json_object: false``) or an
    unset kind is dropped rather than passed on, since vLLM counts every key that is not None as a constraint.
    """
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    spec = request.sampling
    structured = None
    if spec.structured_outputs is not None:
        constraint = {k: v for k, v in spec.structured_outputs.items() if v is not None and v is not False}
        structured = StructuredOutputsParams(**constraint)
    return SamplingParams.from_optional(
        max_tokens=request.max_tokens,
        output_kind=RequestOutputKind.DELTA,
        structured_outputs=structured,
        **spec.engine_kwargs(),
    )


def openai_logprobs(completion: Any, top_k: int) -> list[dict[str, Any]]:
    """The new tokens' log probabilities in OpenAI's shape, one entry per token of ``completion`` (a delta).

    vLLM gives each position a ``{token_id: Logprob}`` dict holding the sampled token first, then the ``top_k``
    most likely (one entry fewer when the sampled token is among them); ``top_logprobs`` is those ``top_k``
    ordered by rank, the sampled token included only when it ranks among them.
    """
    positions = completion.logprobs or []
    entries: list[dict[str, Any]] = []
    for token_id, position in zip(completion.token_ids, positions, strict=False):
        sampled = position.get(token_id)
        ranked = sorted(position.values(), key=lambda lp: lp.rank if lp.rank is not None else float("inf"))
        top = [(lp.decoded_token or "", lp.logprob) for lp in ranked[:top_k]]
        if sampled is None:  # not seen; vLLM always reports the sampled token
            entries.append(logprob_entry("", MIN_LOGPROB, top))
        else:
            entries.append(logprob_entry(sampled.decoded_token or "", sampled.logprob, top))
    return entries
