"""The constraint logits processors on hand-made batches (torch and vLLM's classes, no engine).

The batch-level processor must mask exactly the constrained rows, follow its requests when vLLM removes, adds
and moves rows of its persistent batch, replay the tokens of a request re-added after preemption, and mask the
way the per-request (V0-style) processor does.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

from inference_workers.engine.constraints.processor import (
    EXTRA_ARGS_KEY,
    PER_REQUEST_EXTRA_ARGS_KEY,
    ConstraintLogitsProcessor,
    PerRequestConstraintProcessor,
)

VOCAB = 64
EOS = 2
TOKENS = {"a": 10, "b": 11, "c": 12, "d": 13, "x": 20, "y": 21}


class LetterTokenizer:
    """One token per letter; what the processors need of a tokenizer."""

    eos_token_id = EOS

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [TOKENS[c] for c in text]


def make(cls: type[ConstraintLogitsProcessor] | type[PerRequestConstraintProcessor]) -> Any:
    return cls(None, torch.device("cpu"), False, tokenizer=LetterTokenizer())


def catalogue(*items: str, key: str = EXTRA_ARGS_KEY) -> SamplingParams:
    return SamplingParams(extra_args={key: {"name": "catalogue", "args": {"items": list(items)}}})


def finite(row: torch.Tensor) -> list[int]:
    return torch.isfinite(row).nonzero().flatten().tolist()


def add(*rows: tuple[int, SamplingParams, list[int]], size: int) -> BatchUpdate:
    return BatchUpdate(batch_size=size, removed=[], moved=[], added=[(i, p, [1], out) for i, p, out in rows])


@pytest.fixture
def batch() -> tuple[Any, list[list[int]]]:
    """Row 0: catalogue [ab, ad, x]; row 1: no constraint; row 2: catalogue [y]."""
    processor = make(ConstraintLogitsProcessor)
    outputs: list[list[int]] = [[], [], []]
    processor.update_state(
        add(
            (0, catalogue("ab", "ad", "x"), outputs[0]),
            (1, SamplingParams(), outputs[1]),
            (2, catalogue("y"), outputs[2]),
            size=3,
        )
    )
    return processor, outputs


def test_only_constrained_rows_are_masked_and_they_follow_their_tokens(batch: tuple[Any, list[list[int]]]) -> None:
    processor, outputs = batch
    logits = torch.randn(3, VOCAB)
    before = logits.clone()
    out = processor.apply(logits)
    assert finite(out[0]) == [10, 20]
    assert torch.equal(out[1], before[1])
    assert finite(out[2]) == [21]
    assert torch.equal(out[0, [10, 20]], before[0, [10, 20]])  # allowed logits keep their values

    outputs[0].append(10)  # vLLM appends each sampled token to the request's own list
    outputs[2].append(21)
    processor.update_state(None)
    out = processor.apply(torch.randn(3, VOCAB))
    assert finite(out[0]) == [11, 13]
    assert finite(out[2]) == [EOS]


def test_rows_follow_removals_and_moves(batch: tuple[Any, list[list[int]]]) -> None:
    processor, outputs = batch
    outputs[0].append(10)
    processor.update_state(BatchUpdate(batch_size=3, removed=[], added=[], moved=[(0, 2, MoveDirectionality.SWAP)]))
    out = processor.apply(torch.randn(3, VOCAB))
    assert finite(out[2]) == [11, 13]  # the ab/ad/x request now sits in row 2
    assert finite(out[0]) == [21]
    processor.update_state(BatchUpdate(batch_size=2, removed=[2], added=[], moved=[]))
    processor.update_state(
        BatchUpdate(batch_size=2, removed=[], added=[], moved=[(0, 1, MoveDirectionality.UNIDIRECTIONAL)])
    )
    out = processor.apply(torch.randn(3, VOCAB))
    assert finite(out[1]) == [21]
    assert torch.isfinite(out[0]).all() and torch.isfinite(out[2]).all()


def test_an_unconstrained_batch_is_left_alone() -> None:
    processor = make(ConstraintLogitsProcessor)
    processor.update_state(add((0, SamplingParams(), []), size=1))
    logits = torch.randn(1, VOCAB)
    assert processor.apply(logits) is logits and torch.isfinite(logits).all()


def test_a_request_re_added_after_preemption_replays_its_tokens() -> None:
    processor = make(ConstraintLogitsProcessor)
    processor.update_state(add((0, catalogue("abc", "ad"), [10, 11]), size=1))
    assert finite(processor.apply(torch.randn(1, VOCAB))[0]) == [12]


def test_the_per_request_processor_masks_the_same_way() -> None:
    batch_level = make(ConstraintLogitsProcessor)
    per_request = make(PerRequestConstraintProcessor)
    outputs_a: list[list[int]] = [[], [], []]
    outputs_b: list[list[int]] = [[], [], []]
    params = [catalogue("ab", "x"), SamplingParams(), catalogue("ad", "y")]
    params_b = [
        catalogue("ab", "x", key=PER_REQUEST_EXTRA_ARGS_KEY),
        SamplingParams(),
        catalogue("ad", "y", key=PER_REQUEST_EXTRA_ARGS_KEY),
    ]
    batch_level.update_state(add(*[(i, p, outputs_a[i]) for i, p in enumerate(params)], size=3))
    per_request.update_state(add(*[(i, p, outputs_b[i]) for i, p in enumerate(params_b)], size=3))

    for step_tokens in ([10, 5, 21], [11, 6, EOS]):
        logits = torch.randn(3, VOCAB)
        assert torch.equal(batch_level.apply(logits.clone()), per_request.apply(logits.clone()))
        for i, token in enumerate(step_tokens):
            outputs_a[i].append(token)
            outputs_b[i].append(token)
        batch_level.update_state(None)
        per_request.update_state(None)


def test_vllm_admission_refuses_a_bad_constraint() -> None:
    bad = SamplingParams(extra_args={"constraint": {"name": "catalogue", "args": {"items": []}}})
    with pytest.raises(ValueError, match=r"needs args\.items"):
        ConstraintLogitsProcessor.validate_params(bad)
    ConstraintLogitsProcessor.validate_params(catalogue("ab"))
    ConstraintLogitsProcessor.validate_params(SamplingParams())


def test_each_processor_runs_only_the_requests_that_named_it() -> None:
    batch_level = make(ConstraintLogitsProcessor)
    per_request = make(PerRequestConstraintProcessor)
    update = add((0, catalogue("ab"), []), (1, catalogue("x", key=PER_REQUEST_EXTRA_ARGS_KEY), []), size=2)
    batch_level.update_state(update)
    per_request.update_state(update)
    logits = torch.randn(2, VOCAB)
    batch_level.apply(logits)
    assert finite(logits[0]) == [10] and torch.isfinite(logits[1]).all()
    logits = torch.randn(2, VOCAB)
    per_request.apply(logits)
    assert torch.isfinite(logits[0]).all() and finite(logits[1]) == [20]
