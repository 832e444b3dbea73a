"""Inference engines behind one interface: the real vLLM engine and a simulated one for tests."""

from __future__ import annotations

from core.config import EngineConfig
from inference_workers.engine.base import EngineStats, GenerationDelta, GenerationRequest, InferenceEngine

__all__ = ["EngineStats", "GenerationDelta", "GenerationRequest", "InferenceEngine", "build_engine"]


def build_engine(config: EngineConfig) -> InferenceEngine:
    """The engine ``config.backend`` names: ``vllm`` (default) or ``simulated``."""
    if config.backend == "vllm":
        # Only the chosen engine's module is loaded (the vLLM one reaches for vllm and torch).
        from inference_workers.engine.vllm_engine import VllmEngine

        return VllmEngine(config)
    if config.backend == "simulated":
        from inference_workers.engine.simulated import SimulatedEngine

        return SimulatedEngine(config)
    raise ValueError(f"ENGINE_BACKEND must be 'vllm' or 'simulated', not {config.backend!r}")
