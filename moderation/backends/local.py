"""``local``: alt-profanity-check, a linear model (TF-IDF features, five calibrated linear SVMs) that ships in its
wheel.

It was trained on offensive and profane language (insults, slurs, obscenity), so it judges one category of OpenAI's:
``harassment``. It cannot tell a threat from an insult, or self-harm, sexual content about minors or illicit
instructions written in clean words: those categories are not scored here (docs/moderation.md).

The model loads from the wheel's files on first use (2 to 5 s, once per process; nothing is downloaded). Its
score is the package's ``predict_prob`` (scikit-learn's ``CalibratedClassifierCV.predict_proba``: the mean of five
sigmoid-calibrated SVM margins), computed here with numpy on the model's own coefficients: scikit-learn's checks
around five tiny products cost ~7 ms a prompt, the arithmetic 0.1 ms. The load checks that both give the same
scores, and uses ``predict_prob`` itself if they ever differ (a new model in a new package version).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from moderation.backends.base import ModerationResult

logger = logging.getLogger(__name__)

NAME = "local"
JUDGES: tuple[str, ...] = ("harassment",)
OWN_THRESHOLD = 0.5
"""The model's own decision boundary (a probability): what ``ModerationResult.flagged`` says."""
CHECK_TEXTS = ["you are a fucking idiot", "what is the capital of France?", "kill the process", ""]

_lock = threading.Lock()
_scorer: Callable[[list[str]], Any] | None = None


def _linear_scorer(vectorizer: Any, model: Any) -> Callable[[list[str]], Any]:
    """``predict_proba(...)[:, 1]`` of a binary ``CalibratedClassifierCV(LinearSVC, method="sigmoid")`` as numpy."""
    calibrated = model.calibrated_classifiers_
    weights = np.vstack([c.estimator.coef_.ravel() for c in calibrated])  # (k, features)
    intercepts = np.array([float(c.estimator.intercept_[0]) for c in calibrated])
    slopes = np.array([float(c.calibrators[0].a_) for c in calibrated])
    offsets = np.array([float(c.calibrators[0].b_) for c in calibrated])

    def score(texts: list[str]) -> Any:
        margins = vectorizer.transform(texts) @ weights.T + intercepts  # (texts, k)
        return (1.0 / (1.0 + np.exp(slopes * margins + offsets))).mean(axis=1)

    return score


def _load() -> Callable[[list[str]], Any]:
    # Importing the package loads its model (joblib files inside the wheel): on first use, not at import.
    from profanity_check import profanity_check

    reference = profanity_check.predict_prob
    try:
        fast = _linear_scorer(profanity_check.vectorizer, profanity_check.model)
        if np.allclose(fast(CHECK_TEXTS), reference(CHECK_TEXTS), atol=1e-6):
            return fast
        logger.warning("alt-profanity-check's model is not the one this backend reads; using its predict_prob")
    except (AttributeError, IndexError, TypeError, ValueError) as exc:
        logger.warning("alt-profanity-check's model could not be read (%s); using its predict_prob", exc)
    return reference


def _score() -> Callable[[list[str]], Any]:
    global _scorer
    if _scorer is None:
        with _lock:
            if _scorer is None:
                _scorer = _load()
    return _scorer


def warm_up() -> None:
    """Loads the model now (a web process can call this at start so the first prompt does not wait for it)."""
    _score()(["warm-up"])


def profanity_scores(texts: list[str]) -> list[float]:
    """The model's probability that each text is offensive (what ``profanity_check.predict_prob`` answers)."""
    return [float(score) for score in _score()(texts)] if texts else []


class LocalBackend:
    name = NAME
    judges = JUDGES

    def classify(self, texts: list[str]) -> list[ModerationResult]:
        return [
            ModerationResult(
                flagged=score > OWN_THRESHOLD,
                categories={"harassment": score > OWN_THRESHOLD},
                category_scores={"harassment": score},
                backend=NAME,
            )
            for score in profanity_scores(texts)
        ]
