"""What one generation attempt produced, as the worker hands it to the run lifecycle (``runs.services``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class EngineFinishReason(StrEnum):
    """Why the engine stopped a request (vLLM's ``CompletionOutput.finish_reason``, plus ``abort``)."""

    STOP = "stop"
    """An end-of-sequence token or a stop string."""
    LENGTH = "length"
    """``max_tokens`` (or the context window) was reached."""
    ABORT = "abort"
    """The request was aborted (a cancel, or the worker shutting down)."""
    CONTENT_FILTER = "content_filter"
    """Not the engine's: the output moderation pass flagged the answer and the worker aborted the request."""


@dataclass(frozen=True)
class GenerationResult:
    """The run's answer as the attempt that ends it hands it over (``runs.lifecycle.run_finish``), built by the
    worker's ``GenerationAttempt`` (``inference_workers.services``). An attempt that went on from earlier attempts'
    answer counts their part too."""

    text: str
    """The whole answer: the text already streamed that the attempt went on from, then its own."""
    input_tokens: int
    """The run's own prompt, as the attempt that began the answer counted it (not the answer so far that a
    continuation's prompt also holds)."""
    output_tokens: int
    """The whole answer's tokens, earlier attempts' included."""
    finish_reason: EngineFinishReason
    passes: tuple[dict[str, object], ...] = ()
    """Records of the passes on the stream (``runs.passes``: the output moderation's), added to ``Run.passes``."""
