"""Cross-chat memory's figures: retrieval precision@3 on a labelled set of user facts and later questions, and the
time recall adds before a run is queued.

    .venv/bin/python bench/memory_bench.py quality
    DATABASE_URL=postgres://chat:chat@127.0.0.1:5432/chat_memory_bench REDIS_URL=redis://:PW@127.0.0.1:6379/15 \
        .venv/bin/python bench/memory_bench.py latency --recalls 200 --memories 1000

* **quality** (no database, no worker): ``bench/memory/recall.jsonl`` holds one user's memories, 30 facts about
  them and 30 ordinary prompts they asked before (every prompt is kept, so most memories are not facts), and 60
  later questions: 44 that one or more facts bear on (labelled), 16 that none does. Everything is embedded in this
  process with all-MiniLM-L6-v2 (the reference implementation: transformers, mean pooling, L2 normalization, as
  ``bench/answer_cache_quality.py``), the memories go into one partition of ``core.vector_index.SemanticIndex`` (what
  a web process holds), and each question recalls the top 3 at or above a threshold (``memory.services`` does the
  same, with the row checks). For each threshold: **precision@3** (relevant memories among those recalled, all
  questions pooled), **recall@3** (labelled facts recalled, of those that fit in 3), and how often an unrelated
  question recalls anything at all (every recalled memory costs prompt tokens).
* **latency**: migrates the database, flushes the Redis database (never db 0), starts one embedding worker
  (``manage.py run_embedding_worker``, one torch thread), stores ``--memories`` memories for one user (random unit
  vectors) and calls ``memory.services.memory_recall`` ``--recalls`` times with distinct prompts, as the run's pass
  does: prints the embedding time, the lookup time (catch-up, search, row check, token counting) and their sum.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "bench" / "memory" / "recall.jsonl"
TOP_K = 3
THRESHOLDS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def quality() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    import django

    django.setup()
    from bench.lib.embedding_reference import embed_reference
    from core.vector_index import IndexedRow, SemanticIndex, to_unit

    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    memories = [r for r in rows if r["kind"] in ("fact", "noise")]
    questions = [r for r in rows if r["kind"] == "question"]
    vectors = embed_reference([r["text"] for r in rows])
    index = SemanticIndex(hnsw_min=64)
    ids = {number: memory["id"] for number, memory in enumerate(memories, start=1)}
    index.add(
        IndexedRow(id=number, index_key="user", vector=to_unit(vectors[memory["text"]]))
        for number, memory in enumerate(memories, start=1)
    )
    related = [q for q in questions if q["relevant"]]
    unrelated = [q for q in questions if not q["relevant"]]
    print(
        f"{len(memories)} memories ({sum(m['kind'] == 'fact' for m in memories)} facts), {len(related)} questions "
        f"with a relevant fact, {len(unrelated)} without; top {TOP_K}"
    )
    print("threshold  precision@3  recall@3  unrelated recalling  memories per prompt")
    ranked = {q["text"]: index.search("user", to_unit(vectors[q["text"]]), TOP_K) for q in questions}
    for threshold in THRESHOLDS:
        recalled_total = relevant_recalled = wanted = got = unrelated_hits = 0
        for question in questions:
            recalled = [ids[m] for m, similarity in ranked[question["text"]] if similarity >= threshold]
            recalled_total += len(recalled)
            if question["relevant"]:
                hits = sum(m in question["relevant"] for m in recalled)
                relevant_recalled += hits
                wanted += min(TOP_K, len(question["relevant"]))
                got += hits
            elif recalled:
                unrelated_hits += 1
        precision = relevant_recalled / recalled_total if recalled_total else 0.0
        print(
            f"  {threshold:.2f}     {precision:9.1%}  {got / wanted:8.1%}  {unrelated_hits:>3}/{len(unrelated)} "
            f"({unrelated_hits / len(unrelated):5.1%})  {recalled_total / len(questions):6.2f}"
        )


def latency(recalls: int, count: int) -> None:
    from bench.lib.stack import embedding_worker, ensure_database, flush_redis

    ensure_database(os.environ["DATABASE_URL"])
    flush_redis(os.environ["REDIS_URL"])
    from accounts.models import Tier, User
    from core.vector_index import pack
    from memory.models import Memory
    from memory.services import memory_recall

    with embedding_worker(ROOT / "artifacts" / "memory-bench"):
        user = User.objects.create(username=f"memory-bench-{time.time_ns()}", tier=Tier.objects.get(name="pro"))
        rng = np.random.default_rng(5)
        vectors = rng.standard_normal((count, 384), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        Memory.objects.bulk_create(
            Memory(user=user, content=f"memory {i}", embedding=pack(v), embedding_model="all-MiniLM-L6-v2@v1")
            for i, v in enumerate(vectors)
        )
        words = random.Random(11)
        vocabulary = "my daughter dog car house work lunch run knee kitchen flight cello japanese city".split()

        def sentence() -> str:
            return " ".join(words.choice(vocabulary) for _ in range(words.randint(8, 24)))

        for _ in range(10):  # warm-up: tokenizer load, first catch-up, connections
            memory_recall(user_id=user.pk, tier=user.tier, prompt=sentence(), chat_id=None)
        embed_ms, lookup_ms, added_ms = [], [], []
        for _ in range(recalls):
            result = memory_recall(user_id=user.pk, tier=user.tier, prompt=sentence(), chat_id=None)
            if result.embedded is None:
                raise SystemExit("the prompt was not embedded")
            embed_ms.append(result.embed_ms)
            lookup_ms.append(result.lookup_ms)
            added_ms.append(result.embed_ms + result.lookup_ms)
        print(f"recall ({recalls} prompts, {count} memories of the user):")
        for label, values in (("embedding", embed_ms), ("lookup", lookup_ms), ("added in all", added_ms)):
            print(f"  {label:<13} p50 {pct(values, 0.5):7.2f} ms  p99 {pct(values, 0.99):7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("quality")
    timing = sub.add_parser("latency")
    timing.add_argument("--recalls", type=int, default=200)
    timing.add_argument("--memories", type=int, default=1000)
    args = parser.parse_args()
    print(f"memory bench ({args.what}): {time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores")
    if args.what == "quality":
        quality()
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    if os.environ.get("REDIS_URL", "").rstrip("/").endswith("/0"):
        raise SystemExit("give the bench REDIS_URL of a Redis database of its own (not db 0)")
    import django

    django.setup()
    latency(args.recalls, args.memories)


if __name__ == "__main__":
    main()
