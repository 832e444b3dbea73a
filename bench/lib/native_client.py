"""The native path's client: ``POST /api/chats/{id}/messages``, then ``GET stream_url`` (SSE) until ``done``.

Driven the way vLLM's benchmark client drives ``/v1``: ``prompts`` requests, at most ``concurrency`` at a time.
The prompts are random token ids decoded to text (a seed per round, as the ``/v1`` side's random dataset); the
native API has no ``ignore_eos``, so an answer may stop before ``max_tokens`` at the end-of-turn token, and its
work is counted from the ``done`` event's usage. TTFT = POST start to the first ``delta``; per-token time =
(end - first delta) / (tokens - 1).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.lib.serve_client import LevelResult


@dataclass
class NativeResult:
    ttft_s: float | None
    latency_s: float
    tokens: int
    post_s: float | None
    error: str = ""


def random_prompts(tokenizer_path: str, count: int, input_len: int, seed: int) -> list[str]:
    """``count`` texts of about ``input_len`` tokens: random ids from the vocabulary (special tokens left out)."""
    from transformers import AutoTokenizer  # lazily: only the native path needs it

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    special = set(tokenizer.all_special_ids)
    vocab = np.array([i for i in range(tokenizer.vocab_size) if i not in special])
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):
        text = str(tokenizer.decode(rng.choice(vocab, size=input_len).tolist()))
        texts.append(text if text.strip() else "Hello")
    return texts


async def one_request(client: Any, base: str, token: str, chat_id: int, prompt: str, max_tokens: int) -> NativeResult:
    headers = {"Authorization": f"Token {token}"}
    body = {"content": prompt, "max_tokens": max_tokens, "temperature": 0.0, "top_p": 1.0}
    started = time.monotonic()
    posted = await client.post(f"{base}/api/chats/{chat_id}/messages", json=body, headers=headers)
    if posted.status_code != 202:
        return NativeResult(None, 0.0, 0, None, f"POST {posted.status_code}: {posted.text[:200]}")
    post_s = time.monotonic() - started
    first: float | None = None
    event = ""
    headers["Accept"] = "text/event-stream"
    async with client.stream("GET", base + posted.json()["stream_url"], headers=headers) as response:
        if response.status_code != 200:
            return NativeResult(None, 0.0, 0, post_s, f"GET stream {response.status_code}")
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                if event == "delta" and first is None:
                    first = time.monotonic() - started
                elif event == "reset":
                    first = None
                elif event == "done":
                    usage = json.loads(line[6:]).get("usage", {})
                    tokens = int(usage.get("output_tokens", 0))
                    return NativeResult(first, time.monotonic() - started, tokens, post_s)
                elif event == "error":
                    return NativeResult(first, 0.0, 0, post_s, f"error event: {line[6:200]}")
    return NativeResult(first, 0.0, 0, post_s, "stream ended without done")


async def drive(
    base: str, token: str, chat_ids: list[int], prompts: list[str], concurrency: int, max_tokens: int
) -> tuple[float, list[NativeResult]]:
    """All prompts, ``concurrency`` at a time: the wall time and each request's result."""
    import httpx

    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=2 * concurrency + 8, max_keepalive_connections=2 * concurrency + 8)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:

        async def gated(chat_id: int, prompt: str) -> NativeResult:
            async with gate:
                return await one_request(client, base, token, chat_id, prompt, max_tokens)

        started = time.monotonic()
        results = await asyncio.gather(*(gated(c, p) for c, p in zip(chat_ids, prompts, strict=True)))
        return time.monotonic() - started, list(results)


def summarise(concurrency: int, wall_s: float, results: list[NativeResult]) -> tuple[LevelResult, list[float]]:
    """The level's figures, in the shape of the ``/v1`` side's, and the POSTs' own times (seconds)."""
    ok = [r for r in results if not r.error and r.ttft_s is not None]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpots = [(r.latency_s - r.ttft_s) / (r.tokens - 1) for r in ok if r.ttft_s is not None and r.tokens > 1]
    tokens = sum(r.tokens for r in ok)

    def pct(values: list[float], q: float) -> float:
        return float(np.percentile(values, q)) * 1000 if values else float("nan")

    level = LevelResult(
        concurrency=concurrency,
        prompts=len(results),
        completed=len(ok),
        failed=len(results) - len(ok),
        output_tokens=tokens,
        duration_s=wall_s,
        tok_per_s=tokens / wall_s if wall_s else 0.0,
        ttft_p50_ms=pct(ttfts, 50),
        ttft_p99_ms=pct(ttfts, 99),
        tpot_p50_ms=pct(tpots, 50),
        tpot_p99_ms=pct(tpots, 99),
        errors=[r.error for r in results if r.error][:3],
    )
    return level, [r.post_s for r in results if r.post_s is not None]
