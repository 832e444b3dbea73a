"""The learned difficulty score: logistic regression over cheap features of the prompt's text (pure Python).

Features (:func:`featurize`): a few dense ones (length in characters and words, question marks, digits, code
markers, math operators, line breaks) and hashed word unigrams and bigrams of the first ``MAX_HASHED_WORDS`` words
(CRC-32, stable across processes, unlike ``hash()``), presence only, scaled by 1/sqrt(count). Scoring is one pass
over the words and a sparse dot product: tens of microseconds in one web process, no numpy at run time.

The weights are ``data/difficulty_weights.json``, trained from ``data/difficulty.jsonl`` by
``python manage.py train_difficulty`` (numpy; deterministic, so it reproduces the committed file). The labelled set
is split by prompt family (:func:`is_held_out`): the held-out families are never seen in training, so the agreement
figure is measured on prompts unlike those the model learned from, not on near-copies of them.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
LABELLED_PATH = DATA_DIR / "difficulty.jsonl"
WEIGHTS_PATH = DATA_DIR / "difficulty_weights.json"

BUCKETS = 4096
"""Hashed feature slots (unigrams and bigrams share them)."""
MAX_HASHED_WORDS = 160
"""Only the first words are hashed: a long prompt's length already speaks for it, and scoring stays bounded."""
HELD_OUT_MODULUS = 5
"""One family in five (by CRC-32 of its name) is held out of training."""

DENSE_FEATURES: tuple[str, ...] = (
    "log_chars",
    "log_words",
    "questions",
    "digit_fraction",
    "code_markers",
    "math_operators",
    "line_breaks",
)
_WORD = re.compile(r"[a-z0-9_]+|[{}()\[\];=<>+*/^%#`]")
_CODE_MARKERS = ("```", "def ", "class ", "{", "}", ";", "()", "=>", "import ", "select ", "#include", "</", "==")
_MATH = frozenset("+-*/^=<>%")


def _bucket(feature: str) -> int:
    return zlib.crc32(feature.encode()) % BUCKETS


def featurize(text: str) -> tuple[list[float], dict[int, float]]:
    """``(dense, hashed)``: the dense features in :data:`DENSE_FEATURES` order, and hashed slot -> value."""
    lowered = text.lower()
    words = _WORD.findall(lowered)
    n_chars = len(text)
    digits = sum(ch.isdigit() for ch in text)
    dense = [
        math.log1p(n_chars) / 8.0,
        math.log1p(len(words)) / 6.0,
        min(text.count("?"), 5) / 5.0,
        digits / n_chars if n_chars else 0.0,
        min(sum(lowered.count(m) for m in _CODE_MARKERS), 5) / 5.0,
        min(sum(ch in _MATH for ch in text), 10) / 10.0,
        min(text.count("\n"), 10) / 10.0,
    ]
    head = words[:MAX_HASHED_WORDS]
    slots = {_bucket("w:" + w) for w in head}
    slots.update(_bucket("b:" + a + " " + b) for a, b in itertools.pairwise(head))
    value = 1.0 / math.sqrt(len(slots)) if slots else 0.0
    return dense, dict.fromkeys(slots, value)


@dataclass(frozen=True)
class DifficultyModel:
    """Logistic regression weights; :meth:`score` is the probability of "hard"."""

    bias: float
    dense: tuple[float, ...]
    hashed: tuple[float, ...]

    def score(self, text: str) -> float:
        dense, hashed = featurize(text)
        z = self.bias + sum(w * x for w, x in zip(self.dense, dense, strict=True))
        weights = self.hashed
        z += sum(weights[slot] * x for slot, x in hashed.items())
        if z < -30.0:
            return 0.0
        return 1.0 / (1.0 + math.exp(-z))

    def to_json(self) -> dict[str, object]:
        return {
            "version": 1,
            "buckets": BUCKETS,
            "max_hashed_words": MAX_HASHED_WORDS,
            "bias": round(self.bias, 6),
            "dense": {name: round(w, 6) for name, w in zip(DENSE_FEATURES, self.dense, strict=True)},
            "hashed": {str(i): round(w, 6) for i, w in enumerate(self.hashed) if abs(w) >= 1e-6},
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> DifficultyModel:
        if data.get("buckets") != BUCKETS or data.get("max_hashed_words") != MAX_HASHED_WORDS:
            raise ValueError("difficulty weights were trained with other feature settings: retrain them")
        dense = data["dense"]
        hashed = data["hashed"]
        bias = data["bias"]
        if not (isinstance(dense, dict) and isinstance(hashed, dict) and isinstance(bias, int | float)):
            raise ValueError("difficulty weights need a numeric 'bias' and 'dense' and 'hashed' objects")
        slots = [0.0] * BUCKETS
        for key, w in hashed.items():
            slots[int(key)] = float(w)
        return cls(bias=float(bias), dense=tuple(float(dense[n]) for n in DENSE_FEATURES), hashed=tuple(slots))


@cache
def default_model() -> DifficultyModel:
    """The committed weights (read once per process)."""
    return DifficultyModel.from_json(json.loads(WEIGHTS_PATH.read_text()))


@dataclass(frozen=True)
class LabelledPrompt:
    prompt: str
    hard: bool
    family: str
    output_tokens: int
    """A typical answer length for the prompt (the cost bench's mixed workload)."""


def labelled_prompts(path: Path = LABELLED_PATH) -> Iterator[LabelledPrompt]:
    with path.open() as lines:
        for line in lines:
            if line.strip():
                row = json.loads(line)
                if row["label"] not in ("easy", "hard"):
                    raise ValueError(f"label {row['label']!r} is neither easy nor hard")
                yield LabelledPrompt(row["prompt"], row["label"] == "hard", row["family"], int(row["output_tokens"]))


def is_held_out(family: str) -> bool:
    return zlib.crc32(family.encode()) % HELD_OUT_MODULUS == 0


def agreement(model: DifficultyModel, prompts: list[LabelledPrompt], *, threshold: float = 0.5) -> float:
    """The fraction of ``prompts`` whose label the model's score at ``threshold`` agrees with."""
    if not prompts:
        raise ValueError("no prompts to measure agreement on")
    return sum((model.score(p.prompt) >= threshold) == p.hard for p in prompts) / len(prompts)
