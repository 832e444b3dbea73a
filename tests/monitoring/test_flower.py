"""Flower (``scripts/flower.sh``, what ``make run`` and compose start) is never served without authentication."""

from __future__ import annotations

import base64
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from bench.lib.processes import ROOT, child_env, free_port, stop_process_group


def _status(url: str, auth: str | None = None) -> int:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_flower_refuses_to_start_without_credentials() -> None:
    env = child_env(FLOWER_BASIC_AUTH="", FLOWER_PORT=str(free_port()))
    done = subprocess.run(["bash", "scripts/flower.sh"], cwd=ROOT, env=env, capture_output=True, timeout=30)
    assert done.returncode == 2
    assert b"FLOWER_BASIC_AUTH" in done.stderr


@pytest.mark.live
def test_flower_answers_401_without_credentials_and_200_with_them() -> None:
    port = free_port()
    env = child_env(FLOWER_BASIC_AUTH="ops:s3cret-pass", FLOWER_PORT=str(port))
    proc = subprocess.Popen(
        ["bash", "scripts/flower.sh"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "flower exited"
            try:
                first = _status(url)
                break
            except (urllib.error.URLError, OSError):
                assert time.monotonic() < deadline, "flower never listened"
                time.sleep(0.3)
        assert first == 401
        assert _status(url, "ops:wrong") == 401
        assert _status(url, "ops:s3cret-pass") == 200
    finally:
        stop_process_group(proc)
