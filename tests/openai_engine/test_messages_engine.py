"""On the real engine: a ``/v1/chat/completions`` call is generated from exactly the client's messages through the
chat template, as vLLM's server generates it. No system prompt of ours is added, a system message after the first
turn is rendered in its place, and an assistant's message last is continued (``continue_final_message``).

Each check compares the chat answer at temperature 0 with the answer ``/v1/completions`` gives for the chat template
applied by ``transformers`` to the client's messages as they are (greedy decoding: the same prompt tokens give the
same text), and our worker's prompt text with that rendering.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token

from deployments.tokenizer import get_tokenizer
from inference_workers.prompting import build_run_prompt
from runs.models import Run
from tests.factories import UserFactory
from tests.live_stack import LiveStack

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

MODEL = settings.ENGINE.served_model_name
MAX_TOKENS = 16


def client_for(live_stack: LiveStack) -> openai.OpenAI:
    key = Token.objects.create(user=UserFactory.with_tier("pro")).key
    return openai.OpenAI(base_url=live_stack.url("/v1"), api_key=key, max_retries=0, timeout=180)


def template(messages: list[dict[str, str]], **options: Any) -> str:
    """What vLLM's server renders for ``messages``: the model's own chat template, the messages as they are."""
    rendered: str = get_tokenizer().apply_chat_template(messages, tokenize=False, **options)
    return rendered


def raw_answer(client: openai.OpenAI, prompt: str) -> tuple[str, int]:
    completion = client.completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0)
    assert completion.usage is not None
    return completion.choices[0].text, completion.usage.prompt_tokens


def chat_answer(client: openai.OpenAI, messages: list[Any], **extra: Any) -> tuple[str, int, Run]:
    completion = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=MAX_TOKENS, temperature=0, extra_body=extra or None
    )
    assert completion.usage is not None
    run = Run.objects.select_related("chat", "user_message", "tier").get(pk=int(completion.id.split("-")[1]))
    return str(completion.choices[0].message.content), completion.usage.prompt_tokens, run


def test_without_a_system_message_the_prompt_is_the_template_of_the_clients_messages(live_stack: LiveStack) -> None:
    client = client_for(live_stack)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    text, prompt_tokens, run = chat_answer(client, messages)
    expected = template(messages, add_generation_prompt=True)
    assert settings.CONTEXT.system_prompt not in expected  # the template's own default system prompt, not ours
    assert build_run_prompt(run=run) == expected
    assert (text, prompt_tokens) == raw_answer(client, expected)
    assert "Paris" in text


def test_a_system_message_after_the_first_turn_is_rendered_in_place(live_stack: LiveStack) -> None:
    client = client_for(live_stack)
    messages = [
        {"role": "user", "content": "Name a fruit."},
        {"role": "assistant", "content": "An apple."},
        {"role": "system", "content": "Answer every question with one word."},
        {"role": "user", "content": "Name a colour."},
    ]
    text, prompt_tokens, run = chat_answer(client, messages)
    expected = template(messages, add_generation_prompt=True)
    assert expected.index("<|im_start|>system\nAnswer every") > expected.index("An apple.")
    assert build_run_prompt(run=run) == expected
    assert (text, prompt_tokens) == raw_answer(client, expected)


def test_a_prefilled_answer_is_continued_and_only_the_new_text_comes_back(live_stack: LiveStack) -> None:
    client = client_for(live_stack)
    messages = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is"},
    ]
    text, prompt_tokens, run = chat_answer(client, messages, continue_final_message=True, add_generation_prompt=False)
    expected = template(messages, continue_final_message=True)
    assert expected.endswith("The capital of France is")  # open: no end of turn, no new turn
    assert build_run_prompt(run=run) == expected
    assert (text, prompt_tokens) == raw_answer(client, expected)
    assert not text.startswith("The capital") and "Paris" in text
