"""The semantic answer cache's cost: the time a miss adds before a run is queued (embedding + lookup), and the
vector index's lookup p50/p99 at 10,000 and 1,000,000 entries.

    DATABASE_URL=postgres://chat:chat@127.0.0.1:5432/chat_cache_bench REDIS_URL=redis://:PW@127.0.0.1:6379/15 \
        .venv/bin/python bench/answer_cache_latency.py --lookups 200 --sizes 10000,1000000

* **miss**: migrates the database (``prepare_model``), flushes the Redis database (never db 0), starts one embedding
  worker (``manage.py run_embedding_worker``, one torch thread), stores ``--entries`` entries for one user in the
  partition looked up (random unit vectors), then calls ``answer_cache.services.cache_lookup`` ``--lookups`` times
  with distinct prompts that miss (sentences of 8 to 24 words), as the run's pass will, in this process with the
  default settings (the index catches up with Postgres at most every ``ANSWER_CACHE_SYNC_MS``). Prints the
  embedding time (the Redis RPC to the worker and its forward pass), the lookup time (catch-up, index search, row
  checks) and their sum, p50/p99.
* **index**: one partition's usearch HNSW graph (``core.vector_index.PartitionIndex``, inner product, usearch's
  default connectivity and expansion) filled with N random unit vectors of dimension 384 (not sentence
  embeddings: random vectors are the harder case for a graph, having no cluster structure), then 1,000 searches
  for the 4 nearest (what a lookup asks), one thread: p50/p99 per search, and recall@1 for queries that are
  stored vectors with a little noise. Also the exact search a small partition uses, at 63 entries.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORDS = (
    "the a model vector search cache answer question user river mountain quick brown fox jumps over lazy dog paris "
    "france city music guitar street coffee morning breakfast computer qubit energy light water"
).split()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def unit_vectors(count: int, rng: np.random.Generator, dim: int = 384) -> np.ndarray:
    vectors = rng.standard_normal((count, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def index_figures(sizes: list[int], searches: int, expansion_add: int | None) -> None:
    from usearch.index import Index, MetricKind

    from core.vector_index import PartitionIndex

    rng = np.random.default_rng(3)
    small = PartitionIndex(384, hnsw_min=64)
    for key, vector in enumerate(unit_vectors(63, rng)):
        small.add(key, vector)
    queries = unit_vectors(searches, rng)
    times = []
    for query in queries:
        started = time.perf_counter()
        small.search(query, 4)
        times.append((time.perf_counter() - started) * 1000)
    print(f"index, exact (63 entries):        p50 {pct(times, 0.5):7.3f} ms  p99 {pct(times, 0.99):7.3f} ms")
    for size in sizes:
        partition = PartitionIndex(384, hnsw_min=1)
        if expansion_add is not None:  # a cheaper build than the shipped defaults (said in the output)
            partition._graph = Index(ndim=384, metric=MetricKind.IP, dtype="f32", expansion_add=expansion_add)
        picks = np.sort(rng.choice(size, searches, replace=False))
        kept = np.empty((searches, 384), dtype=np.float32)
        started = time.perf_counter()
        partition.add(0, unit_vectors(1, rng)[0])  # turns into a graph
        graph = partition._graph
        assert graph is not None
        chunk = 50_000  # vectors are made chunk by chunk: the graph holds its own copy
        for first in range(1, size, chunk):
            vectors = unit_vectors(min(chunk, size - first), rng)
            graph.add(np.arange(first, first + len(vectors), dtype=np.uint64), vectors, threads=os.cpu_count() or 1)
            inside = (picks >= first) & (picks < first + len(vectors))
            kept[inside] = vectors[picks[inside] - first]
        built = time.perf_counter() - started
        kept[picks == 0] = graph.get(0)
        noisy = kept + 0.01 * rng.standard_normal((searches, 384), dtype=np.float32)
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        times, found = [], 0
        for pick, query in zip(picks, noisy, strict=True):
            started = time.perf_counter()
            result = partition.search(query, 4)
            times.append((time.perf_counter() - started) * 1000)
            found += bool(result) and result[0][0] == int(pick)
        random_times = []
        for query in unit_vectors(searches, rng):
            started = time.perf_counter()
            partition.search(query, 4)
            random_times.append((time.perf_counter() - started) * 1000)
        print(
            f"index, HNSW ({size:>9,} entries): p50 {pct(times, 0.5):7.3f} ms  p99 {pct(times, 0.99):7.3f} ms "
            f"(near a stored vector, recall@1 {found / searches:.1%}); random queries p50 "
            f"{pct(random_times, 0.5):.3f} ms p99 {pct(random_times, 0.99):.3f} ms; built in {built:.0f} s, "
            f"{graph.memory_usage / 2**20:,.0f} MiB, expansion_add {graph.expansion_add}, "
            f"connectivity {graph.connectivity}, expansion_search {graph.expansion_search}"
        )
        del partition, graph


def miss_figures(lookups: int, entries: int) -> None:
    from bench.lib.stack import embedding_worker, ensure_database, flush_redis

    ensure_database(os.environ["DATABASE_URL"])
    flush_redis(os.environ["REDIS_URL"])
    from accounts.models import Tier, User
    from answer_cache.keys import CacheKeyParts
    from answer_cache.services import cache_lookup, cache_store
    from deployments.models import ModelDeployment
    from generation.sampling import SamplingSpec

    with embedding_worker(ROOT / "artifacts" / "answer-cache-bench"):
        deployment = ModelDeployment.objects.get(is_default=True)
        user = User.objects.create(username=f"cache-bench-{time.time_ns()}", tier=Tier.objects.get(name="pro"))
        parts = CacheKeyParts(
            deployment_id=deployment.pk,
            deployment_key=deployment.key,
            sampling=SamplingSpec(temperature=0.0),
            max_tokens=256,
        )
        rng = np.random.default_rng(5)
        for vector in unit_vectors(entries, rng):
            cache_store(
                user_id=user.pk,
                tier=user.tier,
                parts=parts,
                prompt="stored prompt",
                answer="stored answer",
                finish_reason="stop",
                input_tokens=20,
                output_tokens=100,
                embedding=[float(x) for x in vector],
                embedding_model="all-MiniLM-L6-v2@v1",
            )
        words = random.Random(11)

        def sentence() -> str:
            return " ".join(words.choice(WORDS) for _ in range(words.randint(8, 24)))

        for _ in range(10):  # warm-up: tokenizer load, first catch-up, connections
            cache_lookup(user_id=user.pk, tier=user.tier, parts=parts, prompt=sentence())
        embed_ms, lookup_ms, added_ms, misses = [], [], [], 0
        for _ in range(lookups):
            result = cache_lookup(user_id=user.pk, tier=user.tier, parts=parts, prompt=sentence())
            if result.bypass is not None:
                raise SystemExit(f"lookup bypassed: {result.bypass}")
            misses += result.hit is None
            embed_ms.append(result.embed_ms)
            lookup_ms.append(result.lookup_ms)
            added_ms.append(result.added_ms)
        print(f"miss ({lookups} lookups, {misses} misses, {entries} entries in the partition):")
        for label, values in (("embedding", embed_ms), ("lookup", lookup_ms), ("added in all", added_ms)):
            print(f"  {label:<13} p50 {pct(values, 0.5):7.2f} ms  p99 {pct(values, 0.99):7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--entries", type=int, default=1000, help="entries stored in the looked-up partition")
    parser.add_argument("--sizes", default="10000,1000000", help="index sizes (empty: skip)")
    parser.add_argument("--searches", type=int, default=1000)
    parser.add_argument("--skip-miss", action="store_true")
    parser.add_argument(
        "--expansion-add",
        type=int,
        default=None,
        help="the graph's build-time expansion (usearch's default 128 is the shipped one; lower builds faster)",
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    if not args.skip_miss and os.environ.get("REDIS_URL", "").rstrip("/").endswith("/0"):
        raise SystemExit("give the bench REDIS_URL of a Redis database of its own (not db 0)")
    import django

    django.setup()
    print(f"answer cache latency: {time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores")
    if not args.skip_miss:
        miss_figures(args.lookups, args.entries)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    if sizes:
        index_figures(sizes, args.searches, args.expansion_add)


if __name__ == "__main__":
    main()
