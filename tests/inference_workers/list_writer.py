"""A stand-in for a run's stream writer in the coalescer's unit tests: the events in a list."""

from __future__ import annotations

import time
from typing import Any

from runs.streaming.contract import StreamEvent


class Written:
    """An append the list took at once (``RunStreamWriter.append_later``'s pending append, already answered)."""

    done = True

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.answered_at = time.monotonic()

    def result(self) -> int:
        return self.seq


class ListWriter:
    """Keeps each appended event's data, in order; a list loses no entries and never fails."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.gap: tuple[int, int] | None = None

    def append(self, event: StreamEvent, data: dict[str, Any]) -> int:
        self.events.append(data)
        return len(self.events)

    def append_later(self, event: StreamEvent, data: dict[str, Any]) -> Written:
        return Written(self.append(event, data))
