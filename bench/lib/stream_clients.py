"""Clients that stream runs through the public API and the accounting of what they got: each client posts a
prompt in a chat of its own and follows the run's SSE stream, reconnecting with ``Last-Event-ID`` whenever the
connection ends before ``done`` or ``error``; its text is then compared with the stored answer, and lost and
duplicated tokens (the simulated engine's words) come from a diff of the two. ``bench/fault_suite.py`` and
``bench/hosts_test.py`` both count with these, and print the same table."""

from __future__ import annotations

import difflib
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

TERMINAL = {"done", "cancelled", "failed"}


class Counters:
    """What every client of one fault saw, across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.five_xx: list[str] = []

    def saw(self, response: httpx.Response, what: str) -> None:
        if response.status_code >= 500:
            with self.lock:
                self.five_xx.append(f"{what}: {response.status_code}")


def api_call(
    counters: Counters,
    method: str,
    url: str,
    *,
    token: str,
    deadline: float,
    body: dict[str, Any] | None = None,
    expect: tuple[int, ...] = (200, 201, 202),
) -> httpx.Response:
    """One API call, repeated (every 5xx counted) until it answers one of ``expect`` or ``deadline`` passes.
    Connection errors are retried too (the web process may be restarting)."""
    headers = {"Authorization": f"Token {token}"}
    last: str = ""
    while time.monotonic() < deadline:
        try:
            response = httpx.request(method, url, headers=headers, json=body, timeout=10)
        except httpx.TransportError as exc:
            last = repr(exc)
            time.sleep(0.25)
            continue
        counters.saw(response, f"{method} {re.sub(r'/[0-9]+', '/N', url.split('/', 3)[-1])}")
        if response.status_code in expect:
            return response
        last = f"{response.status_code} {response.text[:200]}"
        retry_after = float(response.headers.get("Retry-After", "0.5") or 0.5)
        time.sleep(min(max(retry_after, 0.25), 2.0))
    raise TimeoutError(f"{method} {url}: no answer in time ({last})")


@dataclass
class Cut:
    kind: str  # "events": hang up after this many events of a connection; "bytes": after this many bytes
    n: int


@dataclass
class Follow:
    """One client following one run."""

    run_id: int
    chat_id: int
    token: str
    cuts: list[Cut] = field(default_factory=list)
    text: str = ""
    last_id: int | None = None
    ended: str = ""  # "done", "error", "204", "gave up", or "" (still following)
    ended_at: float | None = None
    connections: int = 0
    planned_cuts: int = 0
    cut_kinds: list[str] = field(default_factory=list)  # per hang-up: "events", "bytes" or "mid-event"
    drops: int = 0  # connections that ended without a terminal event (server gone, connection reset)
    resets: int = 0
    workers: list[str] = field(default_factory=list)
    event_times: list[float] = field(default_factory=list)  # monotonic arrival time of every event with an id
    deltas: int = 0
    delta_times: list[float] = field(default_factory=list)  # monotonic arrival time of every delta
    reconnects: list[float] = field(default_factory=list)  # hang-up (or drop) to the next first event
    errors: list[str] = field(default_factory=list)

    @property
    def worker(self) -> str:
        return self.workers[-1] if self.workers else ""

    def events_after(self, t: float) -> int:
        return sum(1 for e in self.event_times if e > t)


def _parse_event(raw: bytes) -> tuple[str, int | None, dict[str, Any]] | None:
    event, event_id, data = "", None, ""
    for line in raw.decode().split("\n"):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "id":
            event_id = int(value)
        elif name == "data":
            data = value if not data else data + "\n" + value
    if not event:
        return None
    return event, event_id, (json.loads(data) if data else {})


def follow_run(base_url: str, follow: Follow, counters: Counters, *, deadline: float) -> None:
    """Follows the run's stream to its end, hanging up at ``follow.cuts`` and reconnecting with Last-Event-ID
    after each hang-up or dropped connection."""
    url = f"{base_url}/api/runs/{follow.run_id}/stream"
    hung_up_at: float | None = None
    timeout = httpx.Timeout(10.0, read=30.0)
    while time.monotonic() < deadline:
        headers = {"Authorization": f"Token {follow.token}"}
        if follow.last_id is not None:
            headers["Last-Event-ID"] = str(follow.last_id)
        cut = follow.cuts.pop(0) if follow.cuts else None
        hung_up = resume_now = False
        buffer = b""
        try:
            with httpx.stream("GET", url, headers=headers, timeout=timeout) as response:
                follow.connections += 1
                counters.saw(response, "GET api/runs/N/stream")
                if response.status_code == 204:  # the id is at or past the end: nothing left to send
                    if hung_up_at is not None:
                        follow.reconnects.append(time.monotonic() - hung_up_at)
                    follow.ended, follow.ended_at = "204", time.monotonic()
                    return
                if response.status_code != 200:
                    follow.errors.append(f"stream answered {response.status_code}")
                    time.sleep(0.5)
                    continue
                seen, events_here = 0, 0
                for chunk in response.iter_raw():
                    if cut is not None and cut.kind == "bytes" and seen + len(chunk) >= cut.n:
                        chunk, hung_up = chunk[: cut.n - seen], True
                    seen += len(chunk)
                    buffer += chunk
                    while b"\n\n" in buffer:
                        raw, buffer = buffer.split(b"\n\n", 1)
                        parsed = _parse_event(raw)
                        if parsed is None:
                            continue
                        event, event_id, data = parsed
                        now = time.monotonic()
                        if hung_up_at is not None:
                            follow.reconnects.append(now - hung_up_at)
                            hung_up_at = None
                        if event == "reconnect":  # the web process is shutting down: resume elsewhere
                            resume_now = True
                            break
                        if event_id is not None:
                            follow.last_id = event_id
                            follow.event_times.append(now)
                        if event == "reset":
                            follow.text, follow.resets = "", follow.resets + 1
                        elif event == "delta":
                            follow.text += data["text"]
                            follow.deltas += 1
                            follow.delta_times.append(now)
                        elif event == "status" and data.get("worker"):
                            follow.workers.append(str(data["worker"]))
                        elif event in ("done", "error"):
                            follow.ended, follow.ended_at = event, now
                            if event == "error":
                                follow.errors.append(f"error event: {data}")
                            return
                        events_here += 1
                        if cut is not None and cut.kind == "events" and events_here >= cut.n:
                            hung_up = True
                            break
                    if hung_up or resume_now:
                        break
        except httpx.TransportError as exc:
            if hung_up_at is None:
                follow.drops += 1
                follow.errors.append(repr(exc)[:120])
                hung_up_at = time.monotonic()
            time.sleep(0.2)
            continue
        if hung_up:
            follow.planned_cuts += 1
            kind = cut.kind if cut is not None else "?"
            follow.cut_kinds.append("mid-event" if kind == "bytes" and buffer.strip(b"\n") else kind)
        else:
            follow.drops += 1
            if not resume_now:
                follow.errors.append("the stream ended without done or error")
        if hung_up_at is None:
            hung_up_at = time.monotonic()
    follow.ended = follow.ended or "gave up"


def post_prompt(base_url: str, token: str, counters: Counters, *, deadline: float, index: int) -> Follow:
    """A chat of its own and a prompt in it; returns the run to follow."""
    chat = api_call(counters, "POST", f"{base_url}/api/chats", token=token, deadline=deadline, body={})
    chat_id = int(chat.json()["id"])
    posted = api_call(
        counters,
        "POST",
        f"{base_url}/api/chats/{chat_id}/messages",
        token=token,
        deadline=deadline,
        body={"content": f"Fault suite prompt {index}: tell me about batching ({random.random():.6f})."},
    )
    return Follow(run_id=int(posted.json()["run"]["id"]), chat_id=chat_id, token=token)


# -- accounting ------------------------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    run_id: int
    status: str
    attempts: int
    exact: bool
    lost: int
    duplicated: int
    duplicate_messages: int
    stuck: bool
    error: str
    client: dict[str, Any] = field(default_factory=dict)


def token_diff(stored: str, received: str) -> tuple[int, int]:
    """(tokens lost, tokens duplicated) of ``received`` against ``stored``; a token is one simulated word."""
    want, got = stored.split(), received.split()
    lost = duplicated = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, want, got, autojunk=False).get_opcodes():
        if op in ("delete", "replace"):
            lost += i2 - i1
        if op in ("insert", "replace"):
            duplicated += j2 - j1
    return lost, duplicated


def account(base_url: str, follow: Follow, counters: Counters, *, deadline: float) -> RunOutcome:
    run = api_call(
        counters, "GET", f"{base_url}/api/runs/{follow.run_id}", token=follow.token, deadline=deadline
    ).json()
    messages = api_call(
        counters,
        "GET",
        f"{base_url}/api/chats/{follow.chat_id}/messages?limit=100",
        token=follow.token,
        deadline=deadline,
    ).json()["results"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    stored = (run.get("assistant_message") or {}).get("content", "")
    # Tokens are counted against a stored answer; a run without one (stuck, failed) is counted as such.
    lost, duplicated = token_diff(stored, follow.text) if run["assistant_message"] is not None else (0, 0)
    exact = run["status"] == "done" and follow.ended in ("done", "204") and follow.text == stored
    return RunOutcome(
        run_id=follow.run_id,
        status=run["status"],
        attempts=int(run["attempts"]),
        exact=exact,
        lost=lost,
        duplicated=duplicated,
        duplicate_messages=max(0, len(assistant) - 1),
        stuck=run["status"] not in TERMINAL,
        error=run.get("error") or "",
        client={
            "ended": follow.ended,
            "connections": follow.connections,
            "planned_cuts": follow.planned_cuts,
            "drops": follow.drops,
            "resets": follow.resets,
            "workers": follow.workers,
            "deltas": follow.deltas,
            "chars": len(follow.text),
            "stored_chars": len(stored),
            "errors": follow.errors[:5],
        },
    )


@dataclass
class FaultResult:
    fault: str
    runs: int = 0
    exact: int = 0
    lost: int = 0
    duplicated: int = 0
    duplicate_messages: int = 0
    stuck: int = 0
    five_xx: int = 0
    recover_s: float | None = None
    recover_what: str = ""
    notes: list[str] = field(default_factory=list)
    outcomes: list[RunOutcome] = field(default_factory=list)
    skipped: str = ""

    def add(self, outcomes: list[RunOutcome]) -> None:
        self.outcomes += outcomes
        self.runs += len(outcomes)
        self.exact += sum(o.exact for o in outcomes)
        self.lost += sum(o.lost for o in outcomes)
        self.duplicated += sum(o.duplicated for o in outcomes)
        self.duplicate_messages += sum(o.duplicate_messages for o in outcomes)
        self.stuck += sum(o.stuck for o in outcomes)

    def summarize_outcomes(self) -> None:
        failed = [o for o in self.outcomes if o.status == "failed"]
        restarted = [o for o in self.outcomes if o.attempts > 1]
        if restarted:
            self.notes.append(
                f"{len(restarted)} runs were generated again (attempt 2+) and ended "
                + counts_of(o.status for o in restarted)
            )
        for o in failed:
            self.notes.append(f"run {o.run_id} failed: {o.error}")
        for o in self.outcomes:
            if not o.exact and o.status != "failed":
                self.notes.append(
                    f"run {o.run_id} ({o.status}): text not exact, {o.lost} lost / {o.duplicated} duplicated"
                )


def counts_of(values: Iterator[str] | list[str]) -> str:
    found: dict[str, int] = {}
    for value in values:
        found[value] = found.get(value, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(found.items()))


def run_clients(base_url: str, follows: list[Follow], counters: Counters, *, deadline: float) -> list[threading.Thread]:
    threads = [
        threading.Thread(target=follow_run, args=(base_url, f, counters), kwargs={"deadline": deadline}, daemon=True)
        for f in follows
    ]
    for thread in threads:
        thread.start()
    return threads


def join_all(threads: list[threading.Thread], deadline: float) -> None:
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()) + 1)


def wait_for(predicate: Callable[[], bool], *, deadline: float, step: float = 0.05) -> bool:
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


HEADER = (
    "| fault | runs tried | texts exact | tokens lost | tokens duplicated | duplicate assistant messages "
    "| runs stuck | 5xx seen by clients | time to recover |"
)


def table(results: list[FaultResult]) -> str:
    lines = [HEADER, "| --- " * 9 + "|"]
    for r in results:
        if r.skipped:
            lines.append(f"| {r.fault} | skipped: {r.skipped} |" + " |" * 7)
            continue
        recover = f"{r.recover_s:.1f} s" if r.recover_s is not None else "not recovered"
        lines.append(
            f"| {r.fault} | {r.runs} | {r.exact} | {r.lost} | {r.duplicated} | {r.duplicate_messages} | {r.stuck} "
            f"| {r.five_xx} | {recover} |"
        )
    return "\n".join(lines)


def notes(results: list[FaultResult]) -> str:
    out = []
    for r in results:
        if r.skipped:
            continue
        out.append(f"- **{r.fault}** (time to recover: {r.recover_what})")
        out += [f"  - {note}" for note in r.notes]
    return "\n".join(out)
