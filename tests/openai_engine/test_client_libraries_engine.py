"""litellm, instructor and llama-index's OpenAILike against ``/v1`` on the real engine, each as its docs say to reach
an OpenAI-compatible server.

They run from ``.venv-clients`` (scripts/clients-venv.sh, which scripts/test.sh runs: their openai pins conflict with
``.venv``'s), one probe per process (``client_libraries_probe.py``); each answer is checked against what the stack
recorded for it: the run its id names, its text, its token counts.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rest_framework.authtoken.models import Token

from chats.models import MessageRole
from runs.models import Run, RunStatus
from tests.live_stack import LiveStack
from tests.openai_engine.test_parity_engine import MODEL, roomy_user

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("client_libraries_probe.py")
CLIENTS_PYTHON = Path(os.environ.get("CLIENTS_VENV", ROOT / ".venv-clients")) / "bin" / "python"


@pytest.fixture
def probe(live_stack: LiveStack) -> Any:
    if not CLIENTS_PYTHON.exists():
        pytest.fail(f"{CLIENTS_PYTHON} is missing: run `bash scripts/clients-venv.sh` (scripts/test.sh does)")
    key = Token.objects.create(user=roomy_user()).key

    def run(name: str) -> dict[str, Any]:
        env = {
            **os.environ,
            "PROBE_BASE_URL": live_stack.url(""),
            "PROBE_API_KEY": key,
            "PROBE_MODEL": MODEL,
            # litellm: its bundled model-cost map, not the one it would fetch from GitHub; no telemetry.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
        }
        done = subprocess.run(
            [str(CLIENTS_PYTHON), str(PROBE), name], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}"
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    return run


def run_named(answer_id: str) -> tuple[Run, str]:
    """The finished run an answer's id (``chatcmpl-<run>``, ``cmpl-<run>``) names, and the answer it stored."""
    run_id = int(answer_id.rsplit("-", 1)[1])
    run = Run.objects.select_related("assistant_message").get(pk=run_id)
    assert run.status == RunStatus.DONE, (run.status, run.error)
    message = run.assistant_message
    assert message is not None and message.role == MessageRole.ASSISTANT
    return run, message.content


def test_litellm_completion_is_the_recorded_answer(probe: Any) -> None:
    answer = probe("litellm_chat")
    run, stored = run_named(answer["id"])
    assert answer["content"] == stored and answer["content"].strip()
    assert answer["finish_reason"] == run.finish_reason and answer["finish_reason"] in ("stop", "length")
    assert answer["usage"] == [run.input_tokens, run.output_tokens] and 0 < run.output_tokens <= 8


def test_litellm_stream_is_one_answer_with_its_usage(probe: Any) -> None:
    streamed = probe("litellm_stream")
    assert len(streamed["ids"]) == 1
    run, stored = run_named(streamed["ids"][0])
    assert streamed["content"] == stored
    assert streamed["finish_reason"] == run.finish_reason
    assert streamed["usage"] == [run.input_tokens, run.output_tokens]


def test_litellm_named_tool_call_parses(probe: Any) -> None:
    called = probe("litellm_named_tool")
    run_named(called["id"])
    assert called["name"] == "get_weather"
    assert set(called["arguments"]) == {"city"} and 0 < len(called["arguments"]["city"]) <= 20


@pytest.mark.parametrize("mode", ["instructor_tools", "instructor_json_schema"])
def test_instructor_gets_a_validated_model(probe: Any, mode: str) -> None:
    """instructor's default mode (a named tool call) and its JSON-schema mode: the grammar makes the answer
    validate against the pydantic model, so instructor returns it with no retry (``max_retries=0``)."""
    answer = probe(mode)
    run_named(answer["id"])
    city = answer["city"]
    assert set(city) == {"name", "country"}
    assert all(0 <= len(value) <= 20 for value in city.values())


def test_llamaindex_chat_and_stream_chat(probe: Any) -> None:
    chat = probe("llamaindex_chat")
    run, stored = run_named(chat["id"])
    assert chat["content"] == stored and chat["content"].strip()
    system = run.chat.messages.order_by("id").first()
    assert system is not None and (system.role, system.content) == (MessageRole.SYSTEM, "Answer briefly.")
    streamed = probe("llamaindex_stream_chat")
    assert streamed["content"] == run_named(streamed["id"])[1]


def test_llamaindex_complete_goes_to_completions(probe: Any) -> None:
    answer = probe("llamaindex_complete")
    assert answer["id"].startswith("cmpl-")
    _, stored = run_named(answer["id"])
    assert answer["text"] == stored and answer["text"].strip()
