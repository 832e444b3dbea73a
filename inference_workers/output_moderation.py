"""The output moderation pass (``runs.passes``): the answer checked as it streams, per the run's tier policy.

Two modes (``moderation.models.ModerationPolicy.output_mode``):

- ``holdback``: the coalescer writes nothing until a window of ``holdback_tokens`` is buffered, and checks the
  answer's newest text before each write; a flagged window is never written. It costs latency: the first text
  waits for a window instead of going out with the first token.
- ``retract``: the coalescer writes as usual and the guard checks behind, each window of new text once written;
  a hit stops the run and the stream's ``retract`` event withdraws the text clients have shown.

Either way a hit ends the run ``content_filter`` with a retracted (empty) stored message, so the stored message,
the live stream and a resumed stream agree. Each check reads the newest text with some of the text before it
(:data:`OVERLAP_CHARS`), so a phrase split across two windows is still seen whole, and a long clean answer does not
dilute a bad window (the local classifier scores a text as a whole).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from moderation.selectors import PolicySnapshot
from moderation.services import moderate_output_window
from moderation.verdicts import Verdict
from runs.passes.moderate_input import verdict_detail

NAME = "moderate_output"
OVERLAP_CHARS = 200
"""Text before the newest window that each check reads again."""
HOLDBACK = "holdback"
RETRACT = "retract"


class OutputFlagged(Exception):
    """The guard flagged the answer: the attempt stops, retracts and ends the run ``content_filter``."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(f"output flagged ({verdict.backend})")
        self.verdict = verdict


@dataclass
class OutputGuard:
    """Checks one attempt's answer in windows; keeps what its checks cost for the run's pass record."""

    policy: PolicySnapshot
    checked_chars: int = 0
    """How much of the answer the checks have read."""
    unchecked_tokens: int = 0
    checks: int = 0
    check_ms: list[float] = field(default_factory=list)
    flagged: Verdict | None = None

    @property
    def holds_back(self) -> bool:
        return self.policy.output_mode == HOLDBACK

    @property
    def window(self) -> int:
        return max(1, self.policy.holdback_tokens)

    def check(self, text: str) -> None:
        """Checks the answer's text not yet read (with the overlap); raises :class:`OutputFlagged` on a hit."""
        if len(text) <= self.checked_chars:
            return
        subject = text[max(0, self.checked_chars - OVERLAP_CHARS) :]
        started = time.perf_counter()
        verdict = moderate_output_window(policy=self.policy, text=subject)
        self.check_ms.append((time.perf_counter() - started) * 1000)
        self.checks += 1
        self.checked_chars = len(text)
        self.unchecked_tokens = 0
        if verdict.flagged:
            self.flagged = verdict
            raise OutputFlagged(verdict)

    def written(self, text: str, tokens: int) -> None:
        """A delta went to the stream (``retract`` mode): checks once a window of new tokens is there."""
        self.unchecked_tokens += tokens
        if self.unchecked_tokens >= self.window:
            self.check(text)

    def record(self) -> dict[str, object]:
        """The run's record of this pass: the decision, the checks and what they cost."""
        ms = sorted(self.check_ms)
        detail: dict[str, object] = {
            "pass": NAME,
            "decision": "retracted" if self.flagged is not None else "allowed",
            "mode": self.policy.output_mode,
            "window_tokens": self.window,
            "checks": self.checks,
            "ms": round(sum(ms), 3),
            "max_check_ms": round(ms[-1], 3) if ms else 0.0,
        }
        if self.flagged is not None:
            detail.update(verdict_detail(self.flagged))
        return detail


def output_guard(policy: PolicySnapshot) -> OutputGuard | None:
    """The guard for a run whose tier's policy checks its output (None: ``off``)."""
    if policy.output_mode not in (HOLDBACK, RETRACT):
        return None
    return OutputGuard(policy)
