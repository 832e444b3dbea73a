"""Throwaway ``redis-server`` processes for the high-availability, ACL and TLS tests: a primary, a replica and
Sentinels on loopback ports 27000-27099 (never the shared server), each in the test's temporary folder."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.lib.certificates import Certificates
from bench.lib.certificates import make_certificates as bench_certificates

PORTS = range(27000, 27100)
PASSWORD = "ha-test-password"
MASTER = "hatest"


def claim_port(taken: set[int]) -> int:
    """A port of :data:`PORTS` that nothing listens on and this test has not handed out yet."""
    for port in PORTS:
        if port in taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise RuntimeError("no free port in 27000-27099")


def wait_until(check: Any, *, timeout_s: float = 60.0, what: str) -> Any:
    """Polls ``check()`` until it returns something true (never a timed assertion: a deadline for a hang)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except (redis.RedisError, OSError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)


@dataclass
class Server:
    port: int
    proc: subprocess.Popen[bytes]
    client_options: dict[str, Any] = field(default_factory=dict)

    def client(self, **options: Any) -> redis.Redis:
        return redis.Redis(
            port=self.port, socket_timeout=5, decode_responses=True, **{**self.client_options, **options}
        )

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.proc.wait(10)


def start_server(
    folder: Path, port: int, *args: str, config: str = "", client_options: dict[str, Any] | None = None
) -> Server:
    """``redis-server`` (``--sentinel`` among ``args`` makes a Sentinel) with its files in ``folder``."""
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server on PATH")
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "redis.conf"
    conf.write_text(f'port {port}\nbind 127.0.0.1\ndir {folder}\nsave ""\nappendonly no\n{config}')
    log = open(folder / "server.log", "wb")  # the server writes it while it runs
    proc = subprocess.Popen(["redis-server", str(conf), *args], stdout=log, stderr=subprocess.STDOUT)
    server = Server(port=port, proc=proc, client_options=client_options or {})
    probe = server.client()
    try:
        wait_until(lambda: proc.poll() is None and probe.ping(), timeout_s=20, what=f"redis-server on {port}")
    except AssertionError:
        server.stop()
        raise AssertionError(f"redis-server on {port} did not start: {(folder / 'server.log').read_text()}") from None
    return server


@dataclass
class SentinelSetup:
    primary: Server
    replica: Server
    sentinels: list[Server]

    def sentinel_client(self) -> redis.Redis:
        return self.sentinels[0].client()

    def primary_port(self) -> int:
        """The primary's port once every Sentinel names the same one and none sees it down, as a client's
        ``discover_master`` requires (right after a failover one Sentinel may still flag it); 0 until then."""
        ports: set[int] = set()
        for sentinel in self.sentinels:
            state: dict[str, Any] = sentinel.client().sentinel_master(MASTER)  # type: ignore[assignment]
            if not state.get("is_master") or state.get("is_sdown") or state.get("is_odown"):
                return 0
            ports.add(int(state["port"]))
        return ports.pop() if len(ports) == 1 else 0

    def all_servers(self) -> list[Server]:
        return [self.primary, self.replica, *self.sentinels]


def sentinel_setup(
    root: Path, tls: Certificates | None = None, acl: tuple[Path, dict[str, str]] | None = None
) -> Generator[SentinelSetup, None, None]:
    """A primary and its replica (both with ``requirepass``) and three Sentinels watching them (quorum 2),
    quick to decide: down after 1 s, failover timeout 3 s. Waits until the Sentinels know each other and the
    replica, so a failover can happen. With ``tls`` every server listens on a TLS port only (replication and the
    Sentinels' links included). With ``acl`` (an ACL file and its passwords, ``manage.py redis_acl``) the servers
    load it: the replica replicates as ``replica``, the Sentinels log in as ``sentinel`` (and probes with it)."""
    taken: set[int] = set()

    def listen(port: int) -> str:
        if tls is None:
            return ""
        return (
            f"port 0\ntls-port {port}\ntls-cert-file {tls.cert}\ntls-key-file {tls.key}\n"
            f"tls-ca-cert-file {tls.ca}\ntls-auth-clients no\ntls-replication yes\n"
        )

    tls_client: dict[str, Any] = {} if tls is None else {"ssl": True, "ssl_ca_certs": str(tls.ca)}
    auth = f'requirepass "{PASSWORD}"\nmasterauth "{PASSWORD}"\n'
    login: dict[str, Any] = {"password": PASSWORD}
    sentinel_auth = f'sentinel auth-pass {MASTER} "{PASSWORD}"\n'
    if acl is not None:
        acl_file, passwords = acl
        auth = f"aclfile {acl_file}\nmasteruser replica\nmasterauth {passwords['replica']}\n"
        login = {"username": "sentinel", "password": passwords["sentinel"]}
        sentinel_auth = f"sentinel auth-user {MASTER} sentinel\nsentinel auth-pass {MASTER} {passwords['sentinel']}\n"
    port = claim_port(taken)
    primary = start_server(root / "primary", port, config=listen(port) + auth, client_options={**login, **tls_client})
    servers = [primary]
    try:
        port = claim_port(taken)
        replica = start_server(
            root / "replica",
            port,
            config=listen(port) + auth + f"replicaof 127.0.0.1 {primary.port}\n",
            client_options={**login, **tls_client},
        )
        servers.append(replica)
        sentinel_conf = (
            f"sentinel monitor {MASTER} 127.0.0.1 {primary.port} 2\n"
            + sentinel_auth
            + f"sentinel down-after-milliseconds {MASTER} 1000\n"
            f"sentinel failover-timeout {MASTER} 3000\n"
            f"sentinel parallel-syncs {MASTER} 1\n"
        )
        sentinels = []
        for i in range(3):
            port = claim_port(taken)
            sentinel = start_server(
                root / f"sentinel{i}",
                port,
                "--sentinel",
                config=listen(port) + sentinel_conf,
                client_options=tls_client,
            )
            sentinels.append(sentinel)
            servers.append(sentinel)
        wait_until(lambda: replica.client().info("replication").get("master_link_status") == "up", what="the replica")
        for sentinel in sentinels:
            client = sentinel.client()

            def ready(client: redis.Redis = client) -> bool:
                state: dict[str, Any] = client.sentinel_master(MASTER)  # type: ignore[assignment]
                return int(state["num-other-sentinels"]) == 2 and int(state["num-slaves"]) == 1

            wait_until(ready, what=f"Sentinel {sentinel.port} to see the others and the replica")
        yield SentinelSetup(primary=primary, replica=replica, sentinels=sentinels)
    finally:
        for server in servers:
            if server.proc.poll() is None:
                server.proc.send_signal(signal.SIGCONT)
            server.stop()


def make_certificates(folder: Path) -> Certificates:
    """A throwaway CA and a server certificate it signed for ``localhost`` and ``127.0.0.1`` (``openssl``)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl on PATH")
    return bench_certificates(folder)
