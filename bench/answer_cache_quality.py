"""The semantic answer cache's hit rate, false-hit rate and threshold curve on the labelled prompt pairs, and the
engine tokens it saves on a workload with 30% paraphrased repeats.

    .venv/bin/python bench/answer_cache_quality.py [--threshold 0.9] [--answer-tokens 150]

The pairs are kept in ``bench/answer_cache/``: ``paraphrase.tsv`` (two wordings of one question) and
``different.tsv`` (two different questions: ``hard`` negatives that share most words but differ in a number, an
entity, a direction or a negation; ``topic`` pairs on a related subject; ``unrelated`` ones). Every text is embedded
with all-MiniLM-L6-v2 by the model card's recipe in this process (``AutoModel`` + mean pooling + L2 norm; the
embedding worker's vectors match it within 1e-4 cosine, tests/embeddings), so no stack is needed.

* **Threshold curve**: a paraphrase pair is a *hit* when its cosine is at or above the threshold; a different pair
  at or above it is a *false hit* (the cache would serve the first question's answer to the second).
* **Workload**: every paraphrase pair's first wording and the different pairs' texts (hard negatives first) as new
  questions, then each paraphrase's second wording as a repeat, shuffled with a fixed seed so that repeats come
  after their originals and make 30% of the prompts. Each prompt goes through the cache's own index
  (``core.vector_index.SemanticIndex``, one partition): a hit above the threshold is served, a miss is stored.
  Tokens: a prompt's input tokens are counted with the chat model's tokenizer and chat template (SmolLM2, the
  default deployment); every answer is taken as ``--answer-tokens`` output tokens
  (no answers are generated here: a cache entry records its run's real counts, and the saving per hit is those).
  Engine tokens saved = the sum, over hits, of the prompt's input tokens plus the cached answer's output tokens.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PAIRS = ROOT / "bench" / "answer_cache"


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    paraphrase: bool
    kind: str


def load_pairs() -> list[Pair]:
    pairs: list[Pair] = []
    with (PAIRS / "paraphrase.tsv").open() as f:
        pairs += [Pair(a, b, True, "paraphrase") for a, b in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    with (PAIRS / "different.tsv").open() as f:
        pairs += [Pair(a, b, False, k) for k, a, b in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    return pairs


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def prompt_tokens(texts: list[str]) -> dict[str, int]:
    """Input tokens of each prompt as the chat model sees it (a user message through its chat template)."""
    from django.conf import settings
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(Path(settings.ENGINE.model_cache_dir) / "SmolLM2-135M-Instruct"))
    counts: dict[str, int] = {}
    for text in texts:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        counts[text] = len(ids["input_ids"] if isinstance(ids, dict) else ids)
    return counts


def curve(pairs: list[Pair], sims: list[float], thresholds: list[float]) -> None:
    para = [s for p, s in zip(pairs, sims, strict=True) if p.paraphrase]
    diff = [s for p, s in zip(pairs, sims, strict=True) if not p.paraphrase]
    hard = [s for p, s in zip(pairs, sims, strict=True) if p.kind == "hard"]
    print(f"pairs: {len(para)} paraphrase, {len(diff)} different ({len(hard)} hard negatives)")
    print(
        "| threshold | hit rate (paraphrases served) | false-hit rate (all different pairs) "
        "| false hits, hard negatives |"
    )
    print("| --- | --- | --- | --- |")
    for t in thresholds:
        hit = sum(s >= t for s in para) / len(para)
        false = sum(s >= t for s in diff) / len(diff)
        false_hard = sum(s >= t for s in hard) / len(hard)
        print(f"| {t:.2f} | {hit:.1%} | {false:.1%} | {false_hard:.1%} |")


def workload(
    pairs: list[Pair],
    vectors: dict[str, list[float]],
    tokens: dict[str, int],
    *,
    threshold: float,
    answer_tokens: int,
    repeat_share: float,
    seed: int,
) -> None:
    import numpy as np

    from answer_cache.guard import same_question
    from core.vector_index import IndexedRow, SemanticIndex, to_unit

    question_of: dict[str, int] = {}
    for number, pair in enumerate(pairs):
        question_of.setdefault(pair.a, len(question_of) + 1000 * 0 + number * 2)
        question_of.setdefault(pair.b, (number * 2) if pair.paraphrase else number * 2 + 1)
        if pair.paraphrase:
            question_of[pair.b] = question_of[pair.a]
    rng = random.Random(seed)
    repeats = [p.b for p in pairs if p.paraphrase]
    novel_pool = [p.a for p in pairs if p.paraphrase]
    for kind in ("hard", "topic", "unrelated"):
        novel_pool += [t for p in pairs if p.kind == kind for t in (p.a, p.b) if t not in novel_pool]
    novel = list(dict.fromkeys(novel_pool))
    repeats = rng.sample(repeats, min(len(repeats), round(len(novel) * repeat_share / (1 - repeat_share))))
    stream = novel[:]
    rng.shuffle(stream)
    for text in repeats:  # after its original, anywhere later
        original = next(p.a for p in pairs if p.b == text)
        at = stream.index(original) if original in stream else 0
        stream.insert(rng.randint(at + 1, len(stream)), text)
    index = SemanticIndex(hnsw_min=64)
    stored: dict[int, str] = {}
    hits = false_hits = 0
    saved = spent = 0
    for number, text in enumerate(stream):
        query = to_unit(np.asarray(vectors[text], dtype=np.float32))
        found = [m for m in index.search("p", query, 4) if m[1] >= threshold and same_question(stored[m[0]], text)]
        cost = tokens[text] + answer_tokens
        if found:
            hits += 1
            saved += cost
            if question_of[stored[found[0][0]]] != question_of[text]:
                false_hits += 1
        else:
            spent += cost
            index.add([IndexedRow(id=number + 1, index_key="p", vector=query)])
            stored[number + 1] = text
    total = saved + spent
    print(
        f"workload: {len(stream)} prompts, {len(repeats)} paraphrased repeats ({len(repeats) / len(stream):.0%}), "
        f"threshold {threshold:.2f}, {answer_tokens} output tokens per answer"
    )
    print(
        f"  served from the cache: {hits} ({hits / len(stream):.1%} of prompts; {false_hits} of them false hits); "
        f"repeats caught: {hits - false_hits}/{len(repeats)}"
    )
    print(f"  engine tokens: {total} without the cache, {spent} with it: {saved} saved ({saved / total:.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threshold", type=float, default=None, help="default: the shipped one")
    parser.add_argument("--answer-tokens", type=int, default=150)
    parser.add_argument("--repeat-share", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from answer_cache.models import DEFAULT_THRESHOLD
    from bench.lib.embedding_reference import embed_reference

    threshold = DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    pairs = load_pairs()
    texts = list(dict.fromkeys(t for p in pairs for t in (p.a, p.b)))
    started = time.perf_counter()
    vectors = embed_reference(texts)
    print(
        f"answer cache quality: {time.strftime('%Y-%m-%d %H:%M')} UTC, {len(texts)} texts embedded in "
        f"{time.perf_counter() - started:.1f} s"
    )
    from answer_cache.guard import same_question

    raw = [cosine(vectors[p.a], vectors[p.b]) for p in pairs]
    print("embedding similarity alone:")
    curve(pairs, raw, sorted({0.80, 0.84, 0.86, 0.88, 0.90, 0.92, 0.94, threshold}))
    print("with the lexical guard (answer_cache.guard.same_question), as the cache decides:")
    sims = [s if same_question(p.a, p.b) else -1.0 for p, s in zip(pairs, raw, strict=True)]
    curve(pairs, sims, sorted({0.70, 0.75, 0.80, 0.82, 0.84, 0.86, 0.88, 0.90, 0.92, 0.94, 0.96, threshold}))
    para = [s for p, s in zip(pairs, sims, strict=True) if p.paraphrase]
    hard = sorted(((s, p) for p, s in zip(pairs, sims, strict=True) if p.kind == "hard"), key=lambda x: -x[0])
    print(
        f"shipped threshold {threshold:.2f}: hit rate {sum(s >= threshold for s in para) / len(para):.1%}, "
        f"false-hit rate {sum(s >= threshold for s, _ in hard) / len(hard):.1%} on hard negatives"
    )
    print("closest hard negatives:")
    for s, p in hard[:12]:
        print(f"  {s:.3f}  {p.a!r} / {p.b!r}")
    print("farthest paraphrases:")
    for s, p in sorted((s, p) for p, s in zip(pairs, sims, strict=True) if p.paraphrase)[:4]:
        print(f"  {s:.3f}  {p.a!r} / {p.b!r}")
    workload(
        pairs,
        vectors,
        prompt_tokens(texts),
        threshold=threshold,
        answer_tokens=args.answer_tokens,
        repeat_share=args.repeat_share,
        seed=args.seed,
    )


if __name__ == "__main__":
    main()
