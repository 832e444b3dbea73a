"""Two web processes behind a real balancer (HAProxy from Debian, scripts/balancer.sh), the one serving a live stream
killed (SIGKILL) mid-stream: the client's reconnect through the same address, with ``Last-Event-ID``, reaches the
other process and resumes exactly (nothing lost or doubled), and the run is not cancelled.

HAProxy checks ``/healthz`` every 200 ms and names the server that answered in ``X-Served-By`` (so the test knows
which process to kill); a connection refused by the killed one is re-dispatched to the other (``option redispatch``).
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from accounts.models import User
from bench.lib.processes import child_env, free_port, wait_http
from runs.models import Run, RunStatus
from runs.streaming.contract import StreamEvent
from tests.runs.stream_helpers import (
    LOGS,
    SseEvent,
    in_thread,
    iter_events,
    last_id,
    make_chunks,
    make_run,
    read_events,
    reassemble,
    simulate_worker,
    start_web,
    stop_all,
    stream_url,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

HAPROXY_CONFIG = """\
global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout check 2s
    retries 3
    option redispatch
frontend web
    bind 127.0.0.1:{port}
    default_backend webs
backend webs
    balance roundrobin
    option httpchk GET /healthz
    http-response set-header X-Served-By %[srv_name]
{servers}
"""


@pytest.fixture
def balanced(django_db_setup: None, django_db_blocker: Any, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(the balancer's URL, {server name: its web process}) for two web processes behind HAProxy."""
    if shutil.which("haproxy") is None:
        pytest.fail("haproxy is not installed: run `bash scripts/balancer.sh` (scripts/test.sh does)")
    env = child_env(STREAM_STATUS_POLL_S="0.2", STREAM_KEEPALIVE_S="1", LOG_LEVEL="WARNING")
    ports = {"web1": free_port(), "web2": free_port()}
    procs = {name: start_web(port, env) for name, port in ports.items()}
    front = free_port()
    servers = "\n".join(
        f"    server {name} 127.0.0.1:{port} check inter 300ms fall 3 rise 2" for name, port in ports.items()
    )
    config = tmp_path / "haproxy.cfg"
    config.write_text(HAPROXY_CONFIG.format(port=front, servers=servers))
    log = (LOGS / "haproxy.log").open("wb")
    balancer = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for name, port in ports.items():
            wait_http(f"http://127.0.0.1:{port}/healthz", procs[name], timeout_s=60, what=f"uvicorn (logs: {LOGS})")
        wait_http(f"http://127.0.0.1:{front}/healthz", balancer, timeout_s=20, what=f"haproxy (log: {LOGS})")
        yield f"http://127.0.0.1:{front}", procs
    finally:
        balancer.terminate()
        balancer.wait(10)
        stop_all(list(procs.values()))


def read_until_killed(url: str, auth: dict[str, str], procs: dict[str, Any], cut: int) -> tuple[str, list[SseEvent]]:
    """Reads the stream through the balancer; after ``cut`` events, SIGKILLs the web process serving it and reads
    what still arrives until the connection drops. Returns (the killed server's name, the events read)."""
    events: list[SseEvent] = []
    with httpx.Client(timeout=20) as client, client.stream("GET", url, headers=auth) as resp:
        assert resp.status_code == 200
        served_by = resp.headers["x-served-by"]
        try:
            for event in iter_events(resp, deadline=time.monotonic() + 20):
                events.append(event)
                if len(events) == cut:
                    procs[served_by].send_signal(signal.SIGKILL)
        except httpx.HTTPError:
            pass  # the balancer closes the client's connection when its server's goes
    return served_by, events


def test_a_stream_resumes_exactly_through_the_balancer_after_its_web_process_is_killed(
    balanced: tuple[str, dict[str, Any]], owner: User, auth: dict[str, str]
) -> None:
    front, procs = balanced
    rng = random.Random(25)
    run = make_run(owner)
    chunks = make_chunks(rng, 80)
    worker = in_thread(simulate_worker, run, chunks, delay_s=0.05)  # about 4 s of stream
    worker.start()
    try:
        killed, first = read_until_killed(stream_url(front, run), auth, procs, cut=10)
        assert procs[killed].wait(10) == -signal.SIGKILL
        assert first and first[-1].event != StreamEvent.DONE, "the kill came after the end: nothing to resume"
        status, rest = read_events(stream_url(front, run), headers=auth, last_event_id=last_id(first))
    finally:
        worker.join()
    assert status == 200 and rest and rest[-1].event == StreamEvent.DONE
    ids = [e.id for e in first + rest if e.id is not None]
    assert ids == sorted(set(ids)), "ids strictly increase across the reconnect"
    answer = Run.objects.select_related("assistant_message").get(pk=run.pk)
    assert answer.status == RunStatus.DONE  # a web process dying is not the client cancelling
    assert answer.assistant_message is not None
    assert reassemble(first + rest) == answer.assistant_message.content == "".join(chunks)
    survivor = next(name for name in procs if name != killed)
    assert procs[survivor].poll() is None
