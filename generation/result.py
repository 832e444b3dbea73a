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


@dataclass(frozen=True)
class GenerationResult:
    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: EngineFinishReason
