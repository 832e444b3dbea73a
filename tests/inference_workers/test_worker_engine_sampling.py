"""Every ``SamplingSpec`` field reaches vLLM and comes back (stop, seed, logprobs, ignore_eos, structured outputs,
raw prompts): through the real Celery worker and vLLM engine that ``test_worker_engine.py`` drives (the same
worker subprocess, the ``engine_worker`` fixture), plus the conversions to and from vLLM without an engine.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from generation.sampling import SamplingSpec
from runs.models import FinishReason, PromptMode, Run, RunStatus
from runs.streaming.contract import StreamEvent
from tests.inference_workers.conftest import stream_of, text_after_last_reset, wait_terminal
from tests.inference_workers.vllm_worker import queued_run, send_run

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


def test_sampling_params_and_logprobs_in_openais_shape() -> None:
    """No engine needed: the SamplingParams a spec becomes, and vLLM's per-token Logprob dicts converted."""
    from vllm.logprobs import Logprob

    from inference_workers.engine.base import GenerationRequest
    from inference_workers.engine.vllm_engine import openai_logprobs, sampling_params

    spec = SamplingSpec(
        temperature=0.5,
        top_k=5,
        seed=3,
        stop=("x",),
        stop_token_ids=(7,),
        ignore_eos=True,
        min_tokens=2,
        logprobs=2,
        logit_bias={5: 150.0},
        structured_outputs={"json_object": True, "regex": None},
        constraint={"name": "c", "args": {"k": 1}},
    )
    params = sampling_params(GenerationRequest(request_id="r", prompt="p", max_tokens=9, sampling=spec))
    assert (params.temperature, params.top_k, params.seed, params.max_tokens) == (0.5, 5, 3, 9)
    assert (params.stop, params.stop_token_ids, params.ignore_eos, params.min_tokens) == (["x"], [7], True, 2)
    assert params.logprobs == 2 and params.logit_bias == {5: 100.0}  # clamped as vLLM's server clamps it
    assert params.structured_outputs is not None and params.structured_outputs.json_object is True
    assert params.extra_args == {"constraint": {"name": "c", "args": {"k": 1}}}

    class Completion:
        token_ids = [10, 11]
        # As vLLM fills them: the sampled token first, then the top k (the sampled one again if among them).
        logprobs = [
            {10: Logprob(-2.0, 4, " a"), 1: Logprob(-0.1, 1, " b"), 2: Logprob(-0.5, 2, " c")},
            {11: Logprob(-0.2, 1, "é"), 4: Logprob(float("-inf"), 2, " e")},
        ]

    first, second = openai_logprobs(Completion(), 2)
    assert first == {
        "token": " a",
        "logprob": -2.0,
        "bytes": [32, 97],
        "top_logprobs": [
            {"token": " b", "logprob": -0.1, "bytes": [32, 98]},
            {"token": " c", "logprob": -0.5, "bytes": [32, 99]},
        ],
    }
    assert second["bytes"] == list("é".encode()) and [t["token"] for t in second["top_logprobs"]] == ["é", " e"]
    assert second["top_logprobs"][1]["logprob"] == -9999.0  # -inf is not JSON


def _sampled_run(
    content: str, *, max_tokens: int, spec: SamplingSpec, prompt_mode: PromptMode = PromptMode.CHAT
) -> Run:
    run = queued_run(content=content, max_tokens=max_tokens, temperature=spec.temperature)
    run.sampling, run.top_p, run.prompt_mode = spec.to_json(), spec.top_p, prompt_mode
    run.save(update_fields=["sampling", "top_p", "prompt_mode"])
    return run


PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_seed_logprobs_ignore_eos_structured_output_and_raw_prompt_reach_vllm(engine_worker: str) -> None:
    hot = SamplingSpec(temperature=1.0)
    greedy = SamplingSpec(temperature=0.0)
    story = "Write one sentence about a cat."
    runs = {
        "seed_a": _sampled_run(story, max_tokens=16, spec=hot.with_seed(1234)),
        "seed_b": _sampled_run(story, max_tokens=16, spec=hot.with_seed(1234)),
        "seed_c": _sampled_run(story, max_tokens=16, spec=hot.with_seed(99)),
        "logprobs": _sampled_run("Say hello.", max_tokens=8, spec=dataclasses.replace(greedy, logprobs=2)),
        "ignore_eos": _sampled_run("Say hi.", max_tokens=64, spec=dataclasses.replace(greedy, ignore_eos=True)),
        "json": _sampled_run(
            "Give the name and age of a person as JSON.",
            max_tokens=96,
            spec=dataclasses.replace(greedy, structured_outputs={"json": PERSON_SCHEMA}),
        ),
        "raw": _sampled_run("The capital of France is", max_tokens=8, spec=greedy, prompt_mode=PromptMode.RAW),
    }
    for run in runs.values():
        send_run(run)
    done = {name: wait_terminal(run, timeout=240) for name, run in runs.items()}
    assert all(r.status == RunStatus.DONE for r in done.values()), {n: r.error for n, r in done.items()}
    text = {name: r.assistant_message.content if r.assistant_message else "" for name, r in done.items()}

    assert text["seed_a"] == text["seed_b"] != text["seed_c"]

    deltas = [e.data for e in stream_of(done["logprobs"]) if e.event == StreamEvent.DELTA]
    assert deltas and all(len(d["logprobs"]) == d["tokens"] for d in deltas)
    assert sum(d["tokens"] for d in deltas) == done["logprobs"].output_tokens  # the end-of-sequence token too
    entries = [entry for d in deltas for entry in d["logprobs"]]
    assert all(len(e["top_logprobs"]) == 2 and e["logprob"] <= 0 for e in entries)
    assert all(e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"] for e in entries)
    # Greedy decoding: the sampled token is the most likely one.
    assert all(e["token"] == e["top_logprobs"][0]["token"] for e in entries)
    assert "".join(e["token"] for e in entries).startswith(text["logprobs"])

    assert done["ignore_eos"].output_tokens == 64 and done["ignore_eos"].finish_reason == FinishReason.LENGTH

    person = json.loads(text["json"])
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - jsonschema is installed here; check by hand elsewhere
        assert set(person) == {"name", "age"} and isinstance(person["name"], str) and isinstance(person["age"], int)
    else:
        jsonschema.validate(person, PERSON_SCHEMA)

    # Raw: the text itself is the prompt, no chat template (whose system prompt alone is ~20 tokens).
    assert done["raw"].input_tokens <= 8 and done["raw"].output_tokens > 0
    assert "Paris" in text["raw"]


def test_a_stop_string_ends_the_text_before_it(engine_worker: str) -> None:
    greedy = SamplingSpec(temperature=0.0)
    content = "List five fruits, one per line."
    base = wait_terminal(_send_and_return(_sampled_run(content, max_tokens=24, spec=greedy)), timeout=120)
    assert base.status == RunStatus.DONE and base.assistant_message is not None
    full = base.assistant_message.content
    words = full.split()
    assert len(words) >= 4, full
    stop = words[len(words) // 2]
    stopped = wait_terminal(
        _send_and_return(_sampled_run(content, max_tokens=24, spec=dataclasses.replace(greedy, stop=(stop,)))),
        timeout=120,
    )
    assert stopped.status == RunStatus.DONE and stopped.finish_reason == FinishReason.STOP
    assert stopped.assistant_message is not None
    assert stopped.assistant_message.content == full[: full.index(stop)]
    assert stop not in text_after_last_reset(stream_of(stopped))


def _send_and_return(run: Run) -> Run:
    send_run(run)
    return run
