"""Training the difficulty classifier (``manage.py train_difficulty``): logistic regression with numpy.

Full-batch gradient descent from zero weights with L2 regularisation and a fixed number of steps: no randomness,
so the same labelled set gives the same weights (the committed ``data/difficulty_weights.json``). numpy is needed
here only; scoring (``model_routing.difficulty``) is pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model_routing.difficulty import (
    BUCKETS,
    DENSE_FEATURES,
    DifficultyModel,
    LabelledPrompt,
    agreement,
    featurize,
    is_held_out,
    labelled_prompts,
)

STEPS = 3000
LEARNING_RATE = 0.5
L2 = 1e-3


@dataclass(frozen=True)
class TrainingResult:
    model: DifficultyModel
    train_size: int
    held_out_size: int
    train_agreement: float
    held_out_agreement: float


def _matrix(prompts: list[LabelledPrompt]) -> np.ndarray:
    width = len(DENSE_FEATURES) + BUCKETS
    x = np.zeros((len(prompts), width))
    for row, p in enumerate(prompts):
        dense, hashed = featurize(p.prompt)
        x[row, : len(dense)] = dense
        for slot, value in hashed.items():
            x[row, len(DENSE_FEATURES) + slot] = value
    return x


def train(prompts: list[LabelledPrompt] | None = None) -> TrainingResult:
    """Fits on the families that are not held out; reports agreement on both parts."""
    prompts = list(labelled_prompts()) if prompts is None else prompts
    training = [p for p in prompts if not is_held_out(p.family)]
    held_out = [p for p in prompts if is_held_out(p.family)]
    x = _matrix(training)
    y = np.array([1.0 if p.hard else 0.0 for p in training])
    w = np.zeros(x.shape[1])
    b = 0.0
    n = len(training)
    for _ in range(STEPS):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        err = p - y
        w -= LEARNING_RATE * (x.T @ err / n + L2 * w)
        b -= LEARNING_RATE * float(err.mean())
    dense = tuple(float(v) for v in w[: len(DENSE_FEATURES)])
    hashed = tuple(float(v) for v in w[len(DENSE_FEATURES) :])
    # The model as it will be loaded (weights rounded as in the JSON), so the figures are the committed file's.
    model = DifficultyModel.from_json(DifficultyModel(bias=b, dense=dense, hashed=hashed).to_json())
    return TrainingResult(
        model=model,
        train_size=len(training),
        held_out_size=len(held_out),
        train_agreement=agreement(model, training),
        held_out_agreement=agreement(model, held_out),
    )
