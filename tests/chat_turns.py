"""Plays a chat's turns through the real API and the real run lifecycle (no worker): post a prompt, then end its
run as a worker would (``run_mark_streaming``, ``run_finish``), with a given answer and finish reason."""

from __future__ import annotations

from typing import Any

from django.test import TestCase
from rest_framework.test import APIClient

from generation.result import EngineFinishReason, GenerationResult
from runs.lifecycle import run_finish, run_mark_streaming
from runs.models import Run


def finish_run(run_id: int, text: str, finish: EngineFinishReason = EngineFinishReason.STOP, tokens: int = 5) -> Run:
    """Ends the queued run ``run_id`` as a worker would, with ``text`` as its (new) answer; what runs on commit runs
    (the refund, the terminal event), as it would outside a test's transaction."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        return _finish(run_id, text, finish, tokens)


def _finish(run_id: int, text: str, finish: EngineFinishReason, tokens: int) -> Run:
    run, changed = run_mark_streaming(run_id=run_id, worker="w@test")
    assert changed
    result = GenerationResult(text=text, input_tokens=3, output_tokens=tokens, finish_reason=finish)
    finished = run_finish(run_id=run_id, attempt=run.attempts, result=result)
    assert finished is not None
    return finished


def turn(
    api: APIClient, chat_id: int, prompt: str, answer: str, finish: EngineFinishReason = EngineFinishReason.STOP
) -> dict[str, Any]:
    """Posts ``prompt`` to the chat and ends its run with ``answer``; returns the 202 body."""
    with TestCase.captureOnCommitCallbacks(execute=True):  # admission binds the reservation to the run
        resp = api.post(f"/api/chats/{chat_id}/messages", {"content": prompt}, format="json")
    assert resp.status_code == 202, resp.content
    body: dict[str, Any] = resp.json()
    finish_run(body["run"]["id"], answer, finish)
    return body
