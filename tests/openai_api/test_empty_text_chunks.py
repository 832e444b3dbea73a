"""Tokens without text (special tokens the detokenizer skips, an end-of-sequence token under ``ignore_eos``) reach a
``/v1`` client as chunks with empty content, as vLLM's server streams them: an answer of such tokens alone gave no
chunk before its end, and vLLM's benchmark client counted its whole length as its time to first token."""

from __future__ import annotations

import asyncio

import pytest

from openai_api.streaming import Completion, Piece, follow_run
from runs.models import RunStatus
from runs.streaming.contract import RunStreamWriter, StreamEvent
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_delta_of_tokens_without_text_is_a_piece_with_empty_text() -> None:
    run = RunFactory.create(status=RunStatus.STREAMING, attempts=1)
    writer = RunStreamWriter(run.pk)
    writer.append(StreamEvent.STATUS, {"status": "streaming", "attempt": 1})
    writer.append(StreamEvent.DELTA, {"text": "", "tokens": 2, "prompt_tokens": 9})
    completion = Completion()

    async def read() -> list[Piece]:
        pieces = follow_run(run, completion)
        first = await asyncio.wait_for(anext(pieces), timeout=10)
        while first is None:  # (a keep-alive)
            first = await asyncio.wait_for(anext(pieces), timeout=10)
        # The rest comes once the first piece is out (read together, deltas go out merged).
        writer.append(StreamEvent.DELTA, {"text": "Hi", "tokens": 1})
        done = {"status": "done", "finish_reason": "length", "usage": {"input_tokens": 9, "output_tokens": 4}}
        writer.append(StreamEvent.DONE, done)
        return [first, *[p async for p in pieces if p is not None]]

    pieces = asyncio.run(read())
    assert [(p.text, p.tokens) for p in pieces] == [("", 2), ("Hi", 1)]
    assert (completion.text, completion.tokens, completion.completion_tokens) == ("Hi", 3, 4)
