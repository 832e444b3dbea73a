"""What a ``/v1`` stream sends while a run waits (``KEEPALIVE``), read by clients nobody here wrote: vLLM's
benchmark client and the OpenAI client. Each frame is its own network read, as it is when a run waits in the queue
for longer than ``STREAMS.keepalive_s`` before its first token."""

from __future__ import annotations

import json

from openai._streaming import SSEDecoder
from vllm.benchmarks.lib.endpoint_request_func import StreamedResponseHandler

from openai_api.formats import frame
from openai_api.streaming import DONE, KEEPALIVE

CHUNKS = [
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant",
     "content": "Hello"}, "finish_reason": None}]},
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " there"},
     "finish_reason": "stop"}]},
]  # fmt: skip
READS = [KEEPALIVE, KEEPALIVE, frame(CHUNKS[0]), KEEPALIVE, frame(CHUNKS[1]), DONE]


def test_vllms_benchmark_client_reads_every_chunk_after_keep_alives() -> None:
    """As ``vllm.benchmarks.lib.endpoint_request_func`` reads a chat stream: each read stripped, blank reads skipped,
    SSE comments skipped. With ``: keep-alive`` comments it parsed nothing after the first one, and counted the
    request as failed ("Never received a valid chunk to calculate TTFT")."""
    handler = StreamedResponseHandler()
    messages: list[str] = []
    for read in READS:
        stripped = read.strip()
        if not stripped:
            continue
        messages += [m for m in handler.add_chunk(stripped) if not m.startswith(":")]
    payloads = [m.removeprefix("data: ") for m in messages]
    assert payloads[-1] == "[DONE]"
    assert [json.loads(p) for p in payloads[:-1]] == CHUNKS


def test_the_openai_client_sees_the_chunks_and_nothing_for_the_keep_alives() -> None:
    events = list(SSEDecoder().iter_bytes(iter(READS)))
    assert [e.data for e in events] == [json.dumps(c, separators=(",", ":")) for c in CHUNKS] + ["[DONE]"]
