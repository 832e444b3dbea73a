"""A worker's vLLM metrics port listens on loopback unless WORKER_METRICS_ADDR says otherwise."""

from __future__ import annotations

import urllib.request
from typing import Any

import prometheus_client
import pytest
from django.conf import settings

from bench.lib.processes import free_port
from core.config import worker_config_from_env
from inference_workers.signals import serve_engine_metrics


def test_the_default_address_is_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKER_METRICS_ADDR", raising=False)
    assert worker_config_from_env().metrics_addr == "127.0.0.1"
    monkeypatch.setenv("WORKER_METRICS_ADDR", "0.0.0.0")  # noqa: S104 - the documented opt-in
    assert worker_config_from_env().metrics_addr == "0.0.0.0"  # noqa: S104


def test_the_worker_serves_its_metrics_on_the_configured_address_only(monkeypatch: pytest.MonkeyPatch) -> None:
    servers: list[Any] = []
    real = prometheus_client.start_http_server

    def recording(*args: Any, **kwargs: Any) -> Any:
        server, thread = real(*args, **kwargs)
        servers.append(server)
        return server, thread

    monkeypatch.setattr(prometheus_client, "start_http_server", recording)
    port = free_port()
    serve_engine_metrics(port, addr=settings.WORKERS.metrics_addr)
    try:
        [server] = servers
        assert server.server_address[:2] == ("127.0.0.1", port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert resp.status == 200
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
