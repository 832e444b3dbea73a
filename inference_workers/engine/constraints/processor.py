"""The vLLM V1 logits processors that run constraints inside the decode loop (imports torch and vLLM).

:class:`ConstraintLogitsProcessor` is the one the engine registers. vLLM calls it once per step for the whole
batch: ``update_state`` tracks which persistent-batch row holds which constrained request (added, removed,
moved), and ``apply`` advances each constrained request's state machine with its new output tokens, gathers the
allowed (row, token) pairs of all of them and masks the batch in three tensor operations whatever its size
(save the allowed logits, fill the constrained rows with -inf, put the saved logits back). The Python work per
step is one precomputed tuple per constrained request; what still grows with the batch is the memory the fill
writes (a vocabulary-wide row per constrained request). A batch where no request has a constraint costs one dict
check. The states advance in ``apply``, not in ``update_state``: under async scheduling the newest output token
is a placeholder (-1) until just before sampling.

:class:`PerRequestConstraintProcessor` runs the same state machines the way vLLM V0 ran logits processors: one
Python call per request per step, each masking its own row (through vLLM's ``AdapterLogitsProcessor``). It is
here for ``bench/constraint_cost.py`` only, which measures how that grows with the batch; never register it
with a serving engine.

vLLM builds these in its engine-core process from ``vllm_config``; the tokenizer is the engine's own
(``cached_tokenizer_from_config``), loaded on the first constrained request. Both check a request's constraint
at admission (``validate_params``), so a bad one fails that request with a 400, not the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor, BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from generation.constraint_spec import check_constraint
from generation.sampling import SamplingError
from inference_workers.engine.constraints.registry import StateFactories
from inference_workers.engine.constraints.trie import ConstraintState

if TYPE_CHECKING:
    from vllm.config import VllmConfig

EXTRA_ARGS_KEY = "constraint"
PER_REQUEST_EXTRA_ARGS_KEY = "constraint_per_request"
"""The benchmark's requests name their constraint here to have the per-request processor run it instead, so
both processors serve one engine and the benchmark compares them on the same batches."""


def request_constraint(params: SamplingParams, key: str = EXTRA_ARGS_KEY) -> object | None:
    """The ``{"name", "args"}`` a request asked for in ``extra_args[key]``, or None."""
    extra = params.extra_args
    return extra.get(key) if extra else None


def validate_constraint_params(params: SamplingParams, key: str = EXTRA_ARGS_KEY) -> None:
    constraint = request_constraint(params, key)
    if constraint is not None:
        try:
            check_constraint(constraint)
        except SamplingError as error:
            raise ValueError(error.message) from error


class TokenizerStates:
    """Makes a request's constraint state with a tokenizer: the engine's own, loaded on first use, by default.

    Tests and the benchmark pass one (``tokenizer=``) to run a processor outside an engine.
    """

    def __init__(self, vllm_config: VllmConfig | None, tokenizer: Any = None) -> None:
        self._model_config = vllm_config.model_config if vllm_config is not None else None
        self._tokenizer = tokenizer
        self._factories: StateFactories | None = None
        self._eos: tuple[int, ...] = ()

    def new_state(self, constraint: object, params: SamplingParams) -> ConstraintState:
        if self._factories is None:
            if self._tokenizer is None:
                from vllm.tokenizers import cached_tokenizer_from_config

                if self._model_config is None:
                    raise RuntimeError("a constraint processor needs vllm_config or a tokenizer")
                self._tokenizer = cached_tokenizer_from_config(self._model_config)
            tokenizer = self._tokenizer
            self._eos = (tokenizer.eos_token_id,) if tokenizer.eos_token_id is not None else ()
            self._factories = StateFactories(lambda text: tokenizer.encode(text, add_special_tokens=False))
        # Stop ids include EOS even under ignore_eos; a request's own stop_token_ids may end the answer too.
        end_ids = tuple(sorted(params.all_stop_token_ids)) or self._eos
        return self._factories.new_state(constraint, end_ids)


@dataclass
class _Tracked:
    """A constrained request in the batch: its state and how many of its output tokens it has consumed."""

    state: ConstraintState
    output_ids: list[int]
    """vLLM's own running list of the request's output tokens (a reference: it grows in place)."""
    consumed: int = 0

    def catch_up(self) -> tuple[int, ...]:
        out = self.output_ids
        while self.consumed < len(out):
            token = out[self.consumed]
            if token < 0:  # a placeholder under async scheduling, filled in before sampling
                break
            self.state.advance(token)
            self.consumed += 1
        return self.state.allowed_ids()


class ConstraintLogitsProcessor(LogitsProcessor):
    """Every constraint of the registry, for the whole batch at once (see the module docstring)."""

    def __init__(
        self, vllm_config: VllmConfig | None, device: torch.device, is_pin_memory: bool, *, tokenizer: Any = None
    ) -> None:
        self._states = TokenizerStates(vllm_config, tokenizer)
        self._tracked: dict[int, _Tracked] = {}
        """Persistent-batch row -> the constrained request there."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        validate_constraint_params(sampling_params)

    def is_argmax_invariant(self) -> bool:
        """Masking changes the argmax: greedy requests must be masked too."""
        return False

    def _new(self, params: SamplingParams, _prompt: list[int] | None, output_ids: list[int]) -> _Tracked | None:
        constraint = request_constraint(params)
        if constraint is None:
            return None
        return _Tracked(self._states.new_state(constraint, params), output_ids)

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        # A request re-added after preemption brings its earlier output tokens: its fresh state replays them.
        process_dict_updates(self._tracked, batch_update, self._new)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self._tracked:
            return logits
        rows: list[int] = []
        cols: list[int] = []
        constrained: list[int] = []
        for row, tracked in self._tracked.items():
            allowed = tracked.catch_up()
            constrained.append(row)
            rows.extend([row] * len(allowed))
            cols.extend(allowed)
        index = (
            torch.tensor(rows, dtype=torch.long, device=logits.device),
            torch.tensor(cols, dtype=torch.long, device=logits.device),
        )
        kept = logits[index]
        if len(constrained) == logits.shape[0]:
            logits.fill_(float("-inf"))
        else:  # index_fill_ is several times faster than assigning through an index tensor
            logits.index_fill_(0, torch.tensor(constrained, dtype=torch.long, device=logits.device), float("-inf"))
        logits[index] = kept
        return logits


class _RowMask:
    """One request's V0-style processor: called with its output tokens and its logits row, every step."""

    def __init__(self, tracked: _Tracked) -> None:
        self._tracked = tracked

    def __call__(self, output_ids: list[int], row: torch.Tensor) -> torch.Tensor:
        allowed = torch.tensor(self._tracked.catch_up(), dtype=torch.long, device=row.device)
        masked = torch.full_like(row, float("-inf"))
        masked[allowed] = row[allowed]
        return masked


class PerRequestConstraintProcessor(AdapterLogitsProcessor):
    """The same constraints, one Python call per request per step (vLLM V0's way): the benchmark's baseline."""

    def __init__(
        self, vllm_config: VllmConfig | None, device: torch.device, is_pin_memory: bool, *, tokenizer: Any = None
    ) -> None:
        super().__init__(vllm_config, device, is_pin_memory)  # type: ignore[arg-type]
        self._states = TokenizerStates(vllm_config, tokenizer)
        self._pending_output: list[int] | None = None

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        validate_constraint_params(sampling_params, PER_REQUEST_EXTRA_ARGS_KEY)

    def is_argmax_invariant(self) -> bool:
        return False

    def _new_state(self, params: SamplingParams, prompt_ids: list[int] | None, output_ids: list[int]) -> Any:
        # The adapter hands new_req_logits_processor only the params; the state also needs the output list.
        self._pending_output = output_ids
        return super()._new_state(params, prompt_ids, output_ids)

    def new_req_logits_processor(self, params: SamplingParams) -> Any:
        constraint = request_constraint(params, PER_REQUEST_EXTRA_ARGS_KEY)
        if constraint is None or self._pending_output is None:
            return None
        return _RowMask(_Tracked(self._states.new_state(constraint, params), self._pending_output))
