"""Moderation's local backend on the labelled set kept in the repo (``moderation/data/labelled.jsonl``).

    .venv/bin/python bench/moderation_bench.py [--repeat 5]

Prints, for alt-profanity-check (``moderation.backends.local``) through the input pass's own code path
(``moderation.verdicts.judge``: allow-list, classifier, threshold; no database):

1. the detection rate (offensive texts flagged) and false-positive rate (clean texts flagged) at the shipped
   threshold (``ModerationPolicy.threshold``'s default), with the clean texts it flags, then a threshold sweep;
2. the latency of one prompt (one ``judge`` call per text, as ``moderate_input`` makes it): p50 / p99 / max over
   every text, ``--repeat`` times, after the model is loaded (its load time is printed apart);
3. how the score of one offensive sentence falls as clean text surrounds it (why the output pass checks a window,
   not the whole answer so far).

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LABELLED = ROOT / "moderation" / "data" / "labelled.jsonl"
FILLER = (
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen inside the chloroplasts of a leaf. "
)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="timed passes over the labelled set")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    import django

    django.setup()
    from moderation.backends import local
    from moderation.models import ModerationPolicy
    from moderation.verdicts import judge

    rows = [json.loads(line) for line in LABELLED.read_text().splitlines() if line.strip()]
    threshold = ModerationPolicy._meta.get_field("threshold").get_default()
    started = time.perf_counter()
    local.warm_up()
    print(f"model load (first call in a process): {(time.perf_counter() - started) * 1000:.0f} ms")

    offensive = [row["text"] for row in rows if row["label"] == "offensive"]
    clean = [row["text"] for row in rows if row["label"] == "clean"]
    scores = {
        text: result.category_scores["harassment"]
        for text, result in zip([*offensive, *clean], local.LocalBackend().classify([*offensive, *clean]), strict=True)
    }
    print(f"labelled set: {len(offensive)} offensive, {len(clean)} clean ({LABELLED.relative_to(ROOT)})")
    for cut in sorted({0.3, 0.4, 0.5, 0.6, 0.7, 0.8, threshold}):
        detected = sum(scores[t] > cut for t in offensive) / len(offensive)
        false_pos = sum(scores[t] > cut for t in clean) / len(clean)
        mark = "  <- shipped" if cut == threshold else ""
        print(f"threshold {cut:.2f}: detection {detected:6.1%}  false positives {false_pos:6.1%}{mark}")
    print("clean texts flagged at the shipped threshold:")
    for text in clean:
        if scores[text] > threshold:
            print(f"  {scores[text]:.2f}  {text}")
    print("offensive texts missed at the shipped threshold:")
    for text in offensive:
        if scores[text] <= threshold:
            print(f"  {scores[text]:.2f}  {text}")

    texts = [*offensive, *clean]
    times: list[float] = []
    for _ in range(args.repeat):
        for text in texts:
            verdict = judge(text, backend="local", threshold=threshold)
            times.append(verdict.ms)
    print(
        f"latency per prompt (judge, local, {len(times)} calls): p50 {statistics.median(times):.3f} ms  "
        f"p99 {_pct(times, 0.99):.3f} ms  max {max(times):.3f} ms"
    )

    sentence = "You are a fucking idiot."
    for filler_sentences in (0, 1, 3, 10, 30):
        text = FILLER * filler_sentences + sentence
        (result,) = local.LocalBackend().classify([text])
        print(
            f"'{sentence}' after {filler_sentences:2d} clean sentences ({len(text.split()):3d} words): "
            f"score {result.category_scores['harassment']:.2f}"
        )


if __name__ == "__main__":
    main()
