"""The catalogue constraint on the real engine (vLLM V1, SmolLM2 on CPU, fp32, eager): one batch, mixed requests.

Several chat prompts with different catalogues, sampled at temperature 1 with different seeds, run concurrently
with an unconstrained one in the same batch. Each constrained answer must be exactly one of its own items and end
with a stop; the unconstrained one must be the model's free text. The engine is built by ``VllmEngine.start``,
so the test covers the registration of the processor too; requests go to its ``AsyncLLM`` directly, with
``extra_args`` as ``SamplingSpec.engine_kwargs`` makes them.

Run it under ``flock /tmp/engine.lock`` (one engine at a time on these machines).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from django.conf import settings

from generation.constraint_spec import check_constraint
from generation.sampling import SamplingSpec
from inference_workers.engine.vllm_engine import VllmEngine

pytestmark = pytest.mark.engine

CAPITALS = ["Paris", "London", "Berlin", "Madrid"]
FAR_CAPITALS = ["Tokyo", "Lima"]
"""Not what the model would answer about France: only the mask can make it say one of these."""
FRUITS = ["Banana", "Red Apple", "Green Apple", "Kiwi"]
WIDGETS = ["Blue Widget", "Blue Widget XL-200", "Red Widget"]
"""One item is a prefix of another: the answer may stop after it or go on."""

QUESTION = "What is the capital of France?"
CASES: list[tuple[str, list[str], int]] = [
    (QUESTION, CAPITALS, 1),
    (QUESTION, FAR_CAPITALS, 2),
    ("Which fruit is yellow?", FRUITS, 3),
    ("Which fruit is yellow?", FRUITS, 4),
    ("Which product should I buy for my office?", WIDGETS, 5),
    ("Which product should I buy for my office?", WIDGETS, 6),
]


def chat_prompt(tokenizer: Any, question: str) -> str:
    return str(
        tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
        )
    )


async def _generate(llm: Any, prompt: str, params: Any, request_id: str) -> Any:
    final = None
    async for output in llm.generate(prompt, params, request_id):
        final = output
    assert final is not None and final.finished
    return final.outputs[0]


async def _scenario(engine: VllmEngine) -> dict[str, Any]:
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    await engine.start()
    tokenizer = AutoTokenizer.from_pretrained(engine.config.model_path)
    llm: Any = engine._llm  # VllmEngine.generate does not take a SamplingSpec yet
    jobs = []
    for i, (question, items, seed) in enumerate(CASES):
        spec = SamplingSpec(
            temperature=1.0, seed=seed, constraint=check_constraint({"name": "catalogue", "args": {"items": items}})
        )
        params = SamplingParams(max_tokens=32, **spec.engine_kwargs())
        jobs.append(_generate(llm, chat_prompt(tokenizer, question), params, f"constrained-{i}"))
    free = SamplingParams(max_tokens=32, temperature=0.0)
    jobs.append(_generate(llm, chat_prompt(tokenizer, QUESTION), free, "free"))
    outputs = await asyncio.gather(*jobs)
    print("answers:", [o.text for o in outputs])  # shown with -s

    bad = SamplingParams(max_tokens=8, extra_args={"constraint": {"name": "catalogue", "args": {"items": []}}})
    refused: Exception | None = None
    try:
        await _generate(llm, chat_prompt(tokenizer, QUESTION), bad, "bad")
    except VLLMValidationError as error:  # what vLLM's own API server answers with a 400
        refused = error
    after = await _generate(llm, chat_prompt(tokenizer, QUESTION), free, "after")
    return {"outputs": outputs, "refused": refused, "after": after}


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    config = dataclasses.replace(
        settings.ENGINE,
        backend="vllm",
        dtype="float32",
        enforce_eager=True,
        max_num_seqs=8,
        max_model_len=1024,
        kv_cache_space_gib=1,
    )
    engine = VllmEngine(config)

    async def run() -> dict[str, Any]:
        try:
            return await _scenario(engine)
        finally:
            await engine.shutdown()

    return asyncio.run(run())


def test_each_constrained_answer_is_exactly_one_of_its_items(results: dict[str, Any]) -> None:
    constrained = results["outputs"][: len(CASES)]
    for (question, items, seed), output in zip(CASES, constrained, strict=True):
        assert output.text in items, f"{question!r} seed {seed}: {output.text!r} is not one of {items}"
        assert output.finish_reason == "stop"
    assert {o.text for o in constrained[:1]} <= set(CAPITALS)
    assert constrained[1].text in FAR_CAPITALS  # the model would have said Paris: the mask decided


def test_the_unconstrained_request_in_the_same_batch_is_free_text(results: dict[str, Any]) -> None:
    free = results["outputs"][-1]
    every_item = set(CAPITALS + FAR_CAPITALS + FRUITS + WIDGETS)
    assert free.text not in every_item
    assert len(free.token_ids) > 3
    assert "Paris" in free.text
    assert results["after"].text == free.text  # greedy, alone in the batch: the same text, nothing left masked


def test_a_bad_constraint_is_refused_at_admission(results: dict[str, Any]) -> None:
    assert results["refused"] is not None
    assert "needs args.items" in str(results["refused"])
