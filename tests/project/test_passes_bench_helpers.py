"""The pure parts of ``bench/passes_bench.py``: which delta carried which token, and what a flagged run's client saw
before its ``retract`` (the figures of docs/passes.md rest on them)."""

from __future__ import annotations

import pytest

from bench.passes_bench import pct, retract_timing, token_latencies


def test_each_token_waits_for_the_delta_that_carries_it() -> None:
    emitted = [0.0, 1.0, 2.0, 3.0, 4.0]
    # The first token alone at once, then two deltas of two: tokens 1-2 at 2.5, tokens 3-4 at 4.5.
    deltas = [(0.25, 1), (2.5, 2), (4.5, 2)]

    assert token_latencies(emitted, deltas) == [0.25, 1.5, 0.5, 1.5, 0.5]


def test_tokens_never_written_have_no_latency() -> None:
    # A retracted answer: the engine emitted five tokens, the stream carried three.
    assert token_latencies([0.0, 1.0, 2.0, 3.0, 4.0], [(0.5, 1), (3.0, 2)]) == [0.5, 2.0, 1.0]
    # A flagged holdback window: nothing was written.
    assert token_latencies([0.0, 1.0], []) == []


def test_retract_timing_counts_what_was_shown_before_it() -> None:
    emitted = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    deltas = [(0.5, 1), (2.5, 2), (4.5, 2)]

    timing = retract_timing(emitted, deltas, retract_at=4.75)

    assert timing.tokens_shown == 5
    assert timing.from_first_s == 4.75
    assert timing.from_last_shown_s == pytest.approx(0.75)  # the fifth token, emitted at 4.0


def test_a_holdback_retract_shows_nothing() -> None:
    timing = retract_timing([0.0, 1.0, 2.0], [], retract_at=2.5)

    assert (timing.tokens_shown, timing.from_last_shown_s, timing.from_first_s) == (0, None, 2.5)


def test_pct_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]

    assert (pct(values, 0.5), pct(values, 0.99), pct([3.0], 0.99)) == (51.0, 99.0, 3.0)
