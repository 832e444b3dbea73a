"""``/v1/embeddings`` against the reference implementation in-process: throughput and p50/p99 at batch 1, 8 and 32.

    DATABASE_URL=postgres://chat:chat@127.0.0.1:5432/chat_bench REDIS_URL=redis://127.0.0.1:6391/3 \
        flock /tmp/engine.lock .venv/bin/python bench/embeddings_bench.py --requests 60 --concurrency 1,8

Migrates the given database and prepares the default embedding deployment (``prepare_model``), flushes the Redis
database (never db 0), starts one uvicorn web process and one embedding worker (``manage.py run_embedding_worker``,
``EMBEDDING_WORKER_THREADS`` torch threads), and a user whose limits no load reaches. Then, for each batch size
(inputs per request) and each concurrency (requests in flight, asyncio + httpx, keep-alive):

* **served**: ``--requests`` ``POST /v1/embeddings`` (``encoding_format: float``) after ``--warmup`` untimed ones;
  client-side latency p50/p99 and inputs embedded per second;
* **reference**: the same inputs, one batch at a time, through the model card's recipe in this process
  (``transformers`` ``AutoModel`` + mean pooling + L2 norm, the same torch thread count): the floor the served
  path adds its HTTP, admission, Redis RPC and metering to.

Sentences are 8 to 24 words (about 10 to 30 tokens). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORDS = (
    "the a model vector search cache answer question user river mountain quick brown fox jumps over lazy dog paris "
    "france city music guitar street coffee morning breakfast computer qubit energy light water"
).split()


def configure_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


def sentences(count: int, rng: random.Random) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24))) for _ in range(count)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def served(url: str, token: str, batches: list[list[str]], concurrency: int) -> tuple[list[float], float]:
    import httpx

    latencies: list[float] = []
    queue = list(batches)
    headers = {"Authorization": f"Bearer {token}"}

    async def client_loop(client: httpx.AsyncClient) -> None:
        while queue:
            batch = queue.pop()
            start = time.perf_counter()
            response = await client.post(
                f"{url}/v1/embeddings",
                json={"model": "all-MiniLM-L6-v2", "input": batch, "encoding_format": "float"},
                headers=headers,
            )
            latencies.append(time.perf_counter() - start)
            if response.status_code != 200:
                raise SystemExit(f"/v1/embeddings answered {response.status_code}: {response.text[:300]}")

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        began = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        return latencies, time.perf_counter() - began


def reference(folder: Path, batches: list[list[str]], threads: int) -> tuple[list[float], float]:
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()
    latencies: list[float] = []
    began = time.perf_counter()
    for batch in batches:
        start = time.perf_counter()
        encoded = tokenizer(batch, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.inference_mode():
            states = model(**encoded).last_hidden_state
        mask = encoded["attention_mask"].unsqueeze(-1).float()
        pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        torch.nn.functional.normalize(pooled, p=2, dim=1).tolist()
        latencies.append(time.perf_counter() - start)
    return latencies, time.perf_counter() - began


def line(label: str, batch: int, latencies: list[float], elapsed: float) -> str:
    rate = batch * len(latencies) / elapsed
    return (
        f"{label:<22} batch {batch:>2}: p50 {pct(latencies, 0.5) * 1000:7.1f} ms  "
        f"p99 {pct(latencies, 0.99) * 1000:7.1f} ms  {rate:7.1f} inputs/s  ({len(latencies)} requests)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", default="1,8,32")
    parser.add_argument("--concurrency", default="1,8", help="requests in flight for the served path")
    parser.add_argument("--requests", type=int, default=60, help="timed requests per (batch, concurrency)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the worker and the reference")
    args = parser.parse_args()
    if os.environ.get("REDIS_URL", "").rstrip("/").endswith("/0") or "REDIS_URL" not in os.environ:
        raise SystemExit("give the bench REDIS_URL of a Redis database of its own (not db 0)")
    configure_django()
    from bench.lib.processes import web_process
    from bench.lib.stack import embedding_worker, ensure_database, flush_redis, high_limits_user
    from deployments.defaults import default_embedding_fields

    ensure_database(os.environ["DATABASE_URL"])
    flush_redis(os.environ["REDIS_URL"])
    token = high_limits_user()
    folder = Path(default_embedding_fields()["local_path"])
    logs = ROOT / "artifacts" / "embeddings-bench"
    rng = random.Random(7)
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    levels = [int(x) for x in args.concurrency.split(",")]
    print(
        f"embeddings bench: {time.strftime('%Y-%m-%d %H:%M')} UTC, torch threads {args.threads}, {os.cpu_count()} cores"
    )
    with (
        embedding_worker(logs, threads=args.threads, ready_pause_s=0),
        web_process(log=logs / "web.log", EMBEDDING_TIMEOUT_S="120") as url,
    ):
        for batch in sizes:
            for concurrency in levels:
                warm = [sentences(batch, rng) for _ in range(args.warmup)]
                asyncio.run(served(url, token, warm, concurrency))
                batches = [sentences(batch, rng) for _ in range(args.requests)]
                latencies, elapsed = asyncio.run(served(url, token, batches, concurrency))
                print(line(f"served, {concurrency} in flight", batch, latencies, elapsed), flush=True)
    # the worker has stopped: the reference gets the cores to itself
    for batch in sizes:
        reference(folder, [sentences(batch, rng) for _ in range(args.warmup)], args.threads)
        latencies, elapsed = reference(folder, [sentences(batch, rng) for _ in range(args.requests)], args.threads)
        print(line("reference in-process", batch, latencies, elapsed), flush=True)


if __name__ == "__main__":
    main()
