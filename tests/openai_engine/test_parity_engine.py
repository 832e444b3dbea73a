"""OpenAI parity on the real engine, through the whole stack, driven by clients nobody here wrote: the official
``openai`` client, LangChain's ``ChatOpenAI``, and vLLM's own benchmark client.

Every parameter asked for must change the answer the way vLLM's own server changes it: ``stop`` cuts the text,
a ``seed`` repeats it, ``logprobs`` come back, ``n`` gives choices, a JSON schema constrains it, a named tool
call returns arguments that validate, ``ignore_eos`` runs to ``max_tokens``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from django.conf import settings
from pydantic import BaseModel
from rest_framework.authtoken.models import Token

from accounts.models import User, UserLimitOverride
from bench.lib.serve_client import ServeTarget, client_argv
from chats.models import Chat
from runs.models import Run, RunStatus
from tests.factories import UserFactory
from tests.live_stack import LiveStack

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

MODEL = settings.ENGINE.served_model_name
ROOT = Path(__file__).resolve().parents[2]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


def roomy_user() -> User:
    """A pro user whose limits no test here reaches (20 answers at once, large budgets)."""
    user = UserFactory.with_tier("pro")
    UserLimitOverride.objects.create(
        user=user, max_concurrent_runs=32, bucket_capacity_tokens=1_000_000, bucket_refill_per_s=10_000
    )
    return user


def client_for(live_stack: LiveStack, user: User) -> openai.OpenAI:
    key = Token.objects.create(user=user).key
    return openai.OpenAI(base_url=live_stack.url("/v1"), api_key=key, max_retries=0, timeout=180)


def ask(client: openai.OpenAI, content: str, **kwargs: Any) -> Any:
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}], **kwargs)


def test_stop_cuts_the_text_before_the_stop_sequence(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    prompt = "Tell me about Paris."
    free = str(ask(client, prompt, max_tokens=40, temperature=0).choices[0].message.content)
    words = free.split(" ")
    assert len(words) >= 6, free
    stop = " " + words[4]  # greedy decoding: the same text up to there, then the stop string ends it
    cut = ask(client, prompt, max_tokens=40, temperature=0, stop=[stop])
    text = cut.choices[0].message.content
    assert text == free[: free.index(stop)], (free, stop, text)
    assert stop not in text and cut.choices[0].finish_reason == "stop"


def test_a_seed_repeats_the_answer_and_another_seed_differs(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    prompt = "Write a short poem about the sea."

    def sample(seed: int) -> str:
        return str(ask(client, prompt, max_tokens=24, temperature=1.0, seed=seed).choices[0].message.content)

    first, again, other = sample(1234), sample(1234), sample(98765)
    assert first == again
    assert first != other


def test_logprobs_come_back_streamed_and_not(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    completion = ask(client, "Name a fruit.", max_tokens=12, temperature=0, logprobs=True, top_logprobs=3)
    choice = completion.choices[0]
    assert choice.logprobs is not None
    entries = choice.logprobs.content
    # One entry per generated token, the end-of-turn token included (as vLLM's server answers).
    assert len(entries) == completion.usage.completion_tokens
    joined = "".join(e.token for e in entries)
    assert joined.startswith(choice.message.content) and len(joined) > len(choice.message.content) * 0.5
    for entry in entries:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-4  # greedy: the sampled token is the likeliest

    stream = ask(client, "Name a fruit.", max_tokens=12, temperature=0, logprobs=True, top_logprobs=3, stream=True)
    streamed_entries: list[Any] = []
    text = ""
    for chunk in stream:
        for c in chunk.choices:
            text += c.delta.content or ""
            if c.logprobs is not None:
                streamed_entries += c.logprobs.content
    assert text == choice.message.content
    assert [e.token for e in streamed_entries] == [e.token for e in entries]


def test_n_gives_that_many_choices_and_the_usage_adds_up(live_stack: LiveStack) -> None:
    user = roomy_user()
    client = client_for(live_stack, user)
    completion = ask(client, "Say something.", max_tokens=16, temperature=1.0, n=2, seed=7)
    assert [c.index for c in completion.choices] == [0, 1]
    assert all(c.message.content for c in completion.choices)
    runs = list(Run.objects.filter(user=user).order_by("pk"))
    assert len(runs) == 2 and all(r.status == RunStatus.DONE for r in runs)
    assert completion.usage.completion_tokens == sum(r.output_tokens for r in runs)
    assert completion.usage.prompt_tokens == runs[0].input_tokens


def test_json_schema_answers_validate_twenty_of_twenty(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    response_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}

    def one(i: int) -> Any:
        completion = ask(
            client,
            f"Invent a person number {i}: their name and age, as JSON.",
            max_tokens=60,
            temperature=1.0,
            seed=i,
            response_format=response_format,
        )
        return json.loads(completion.choices[0].message.content)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(20)))
    for answer in answers:
        jsonschema.validate(answer, PERSON)
    assert len(answers) == 20


def test_a_named_tool_call_returns_arguments_that_validate(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    tool_choice: Any = {"type": "function", "function": {"name": "get_weather"}}
    completion = ask(
        client,
        "What is the weather in Paris?",
        max_tokens=60,
        temperature=0,
        tools=[WEATHER_TOOL],
        tool_choice=tool_choice,
    )
    calls = completion.choices[0].message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER_TOOL["function"]["parameters"])  # type: ignore[index]

    stream = ask(
        client,
        "What is the weather in Paris?",
        max_tokens=60,
        temperature=0,
        tools=[WEATHER_TOOL],
        tool_choice=tool_choice,
        stream=True,
    )
    arguments = ""
    names = []
    for chunk in stream:
        for c in chunk.choices:
            for call in c.delta.tool_calls or []:
                if call.function and call.function.name:
                    names.append(call.function.name)
                arguments += (call.function.arguments or "") if call.function else ""
    assert names == ["get_weather"]
    assert json.loads(arguments) == json.loads(calls[0].function.arguments)


def test_ignore_eos_runs_to_max_tokens(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    completion = ask(client, "Say hi.", max_tokens=64, temperature=0, extra_body={"ignore_eos": True})
    assert completion.usage.completion_tokens == 64
    assert completion.choices[0].finish_reason == "length"


def test_text_completions_streamed_and_not(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    prompt = "The capital of France is"
    completion = client.completions.create(model=MODEL, prompt=[prompt, "One, two,"], max_tokens=8, temperature=0)
    assert [c.index for c in completion.choices] == [0, 1]
    assert "Paris" in completion.choices[0].text
    streamed = "".join(
        c.text
        for chunk in client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0, stream=True)
        for c in chunk.choices
    )
    assert streamed == completion.choices[0].text


def test_unknown_parameter_and_invalid_schema_are_400s_that_write_nothing(live_stack: LiveStack) -> None:
    user = roomy_user()
    client = client_for(live_stack, user)
    with pytest.raises(openai.BadRequestError) as unknown:
        ask(client, "hi", extra_body={"frobnicate": 1})
    assert "frobnicate" in str(unknown.value)
    bad_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": 3}}}
    with pytest.raises(openai.BadRequestError) as invalid:
        ask(client, "hi", response_format=bad_schema)  # type: ignore[arg-type]
    assert "response_format" in str(invalid.value)
    assert not Chat.objects.filter(owner=user).exists() and not Run.objects.filter(user=user).exists()


class City(BaseModel):
    name: str
    country: str


def test_langchain_with_structured_output_returns_a_valid_object(live_stack: LiveStack) -> None:
    from langchain_openai import ChatOpenAI

    key = Token.objects.create(user=roomy_user()).key
    llm = ChatOpenAI(
        model=MODEL, base_url=live_stack.url("/v1"), api_key=key, temperature=0, max_tokens=60, max_retries=0
    )  # type: ignore[call-arg]
    city = llm.with_structured_output(City).invoke("Name a big city in Japan.")
    assert isinstance(city, City) and city.name and city.country


def test_vllms_benchmark_client_has_no_failed_request_and_its_ttft_is_the_runs(live_stack: LiveStack) -> None:
    user = roomy_user()
    key = Token.objects.create(user=user).key
    out = ROOT / "artifacts" / "bench-serve"
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    target = ServeTarget(base_url=live_stack.base_url, model=MODEL, api_key=key, label="parity")
    for backend, endpoint in (("openai-chat", "/v1/chat/completions"), ("openai", "/v1/completions")):
        name = f"{backend}.json"
        argv = client_argv(
            target,
            tokenizer=settings.ENGINE.model_path,
            concurrency=1,
            prompts=4,
            seed=0,
            input_len=32,
            output_len=8,
            result_dir=out,
            result_name=name,
            backend=backend,
            endpoint=endpoint,
        )
        proc = subprocess.run(
            argv, cwd=ROOT, env={**_env(), "OPENAI_API_KEY": key}, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        results[backend] = json.loads((out / name).read_text())
    for backend, result in results.items():
        assert result["completed"] == 4 and result.get("failed", 0) == 0, (backend, result.get("errors"))
        assert all(tokens == 8 for tokens in result["output_lens"]), (backend, result["output_lens"])
    # One request at a time: the client's TTFT of each is the run's first_token_at - created_at, give or take
    # the request's own handling (parse, admission, the relay to the client).
    # The last four raw-prompt runs are the measured ones (the client's readiness check comes first).
    runs = list(Run.objects.filter(user=user, prompt_mode="raw").order_by("pk"))[-4:]
    ttfts = results["openai"]["ttfts"]
    assert len(runs) == len(ttfts) == 4
    gaps = []
    for run, client_ttft in zip(runs, ttfts, strict=True):
        assert run.first_token_at is not None
        server_ttft = (run.first_token_at - run.created_at).total_seconds()
        print(f"TTFT: vllm bench client {client_ttft * 1000:.1f} ms, run {server_ttft * 1000:.1f} ms")
        gaps.append(abs(client_ttft - server_ttft))
    assert statistics.median(gaps) < 0.05, gaps  # the median request: one slow one on a busy host is not the path


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}


def test_a_catalogue_constraint_answers_one_of_its_items(live_stack: LiveStack) -> None:
    client = client_for(live_stack, roomy_user())
    items = ["Blue Kettle", "Red Notebook XL-200", "Green Lamp"]
    completion = ask(
        client,
        "Which product should I buy to write notes?",
        max_tokens=20,
        temperature=1.0,
        seed=3,
        extra_body={"constraint": {"name": "catalogue", "args": {"items": items}}},
    )
    assert completion.choices[0].message.content in items
    with pytest.raises(openai.BadRequestError) as refused:
        ask(client, "hi", extra_body={"constraint": {"name": "catalogue", "args": {"items": []}}})
    assert refused.value.body["param"] == "constraint"  # type: ignore[index]
