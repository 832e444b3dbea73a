"""Non-streamed generation on this worker's engine, for background work such as chat summaries."""

from __future__ import annotations

import uuid

from generation.sampling import SamplingSpec
from inference_workers.engine.base import GenerationRequest
from inference_workers.engine.host import EngineHost
from inference_workers.runtime import get_runtime


def generate_text(
    *,
    prompt: str,
    max_tokens: int,
    priority: int,
    request_id: str | None = None,
    temperature: float = 0.2,
    host: EngineHost | None = None,
) -> str:
    """The whole answer to ``prompt`` from the process engine (``host`` defaults to the worker runtime's).

    ``priority`` is vLLM's (lower is served first): background work passes a value above every tier's, so the
    engine schedules it behind every waiting interactive request.
    """
    if host is None:
        host = get_runtime().host
    request = GenerationRequest(
        request_id=request_id or f"bg-{uuid.uuid4().hex[:12]}",
        prompt=prompt,
        max_tokens=max_tokens,
        sampling=SamplingSpec(temperature=temperature),
        priority=priority,
    )
    parts = [delta.text for delta in host.stream(request) if delta is not None]
    return "".join(parts)
