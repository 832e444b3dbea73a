"""A web process told to stop ends its run streams with ``reconnect`` (the client's resume point) and exits,
instead of waiting for streams that only end with their run."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time

import pytest
from rest_framework.authtoken.models import Token

from bench.lib.processes import ROOT, child_env, free_port, stop_process_group, wait_http
from runs.models import RunStatus
from runs.streaming.contract import RunStreamWriter, StreamEvent
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _read_events(response: http.client.HTTPResponse, *, until: str, timeout_s: float) -> list[tuple[str, str]]:
    """``(event, data)`` pairs read from an SSE body until an event named ``until`` (or the body ends)."""
    events: list[tuple[str, str]] = []
    event, data = "", ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = response.readline().decode()
        if not line:
            break
        line = line.rstrip("\n")
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            data = line[len("data: ") :]
        elif line == "" and event:
            events.append((event, data))
            if event == until:
                break
            event, data = "", ""
    return events


def test_sigterm_ends_each_stream_with_reconnect_and_the_process_exits() -> None:
    run = RunFactory.create(status=RunStatus.STREAMING)
    token = Token.objects.create(user=run.user).key
    writer = RunStreamWriter(run.pk)
    writer.append(StreamEvent.STATUS, {"status": RunStatus.STREAMING})
    writer.append(StreamEvent.DELTA, {"text": "Hello"})

    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "chatproject.asgi:application", "--host", "127.0.0.1"]
    proc = subprocess.Popen(
        [*argv, "--port", str(port), "--timeout-graceful-shutdown", "30"],
        cwd=ROOT,
        env=child_env(STREAM_STATUS_POLL_S="0.2", STREAM_KEEPALIVE_S="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", f"/api/runs/{run.pk}/stream", headers={"Authorization": f"Token {token}"})
        response = conn.getresponse()
        assert response.status == 200
        assert [e for e, _ in _read_events(response, until="delta", timeout_s=10)] == ["status", "delta"]

        proc.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        rest = _read_events(response, until="reconnect", timeout_s=10)
        assert rest and rest[-1][0] == "reconnect", rest
        assert json.loads(rest[-1][1]) == {"last_event_id": 2}
        assert response.readline() in (b"", b"\n")  # the server closed the stream after it
        proc.wait(timeout=10)
        # Far below --timeout-graceful-shutdown (30 s): the stream did not hold the shutdown back.
        assert time.monotonic() - stopped_at < 10
    finally:
        stop_process_group(proc)
