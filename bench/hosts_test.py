"""Several hosts on this machine: the product across Linux network namespaces, with faults, clients streaming
throughout (issue 25).

    .venv/bin/python bench/hosts_test.py                  # every fault (make hosts-test)
    .venv/bin/python bench/hosts_test.py --quick          # fewer runs, shorter answers (CI; under 4 minutes)
    .venv/bin/python bench/hosts_test.py --fault web_kill --json figures.json

Needs root (``ip netns``), ``ip`` (iproute2), ``haproxy``, ``redis-server`` and the Postgres server binaries
(``scripts/hosts-test.sh`` installs what is missing). The topology (docs/hosts-test.md): one bridge in the root
namespace (``10.77.N.1/24``, N chosen free for the run), and one namespace per host, each with a veth pair into the
bridge; names carry a per-run prefix (``ht<pid>``), so two runs or a run's leftovers never clash:

- ``data`` (``.10``): Postgres (``initdb`` in a temporary folder, as the ``postgres`` user when root), the Redis
  primary (6379) and its replica (6380), a Sentinel (26379), and a moto S3 server (9000): the model store;
- ``web`` (``.20``): two uvicorn web processes on its loopback behind HAProxy on ``.20:8080``, and a Sentinel;
- ``w1``, ``w2`` (``.31``, ``.32``): one Celery worker each on the simulated engine, ``MODEL_CACHE_MODE=per_host``
  with an empty ``MODEL_CACHE_DIR`` of its own, filled from the store at start (checksum verified);
- ``ctl1``, ``ctl2`` (``.41``, ``.42``): the dispatcher's leader and its standby (``manage.py run_dispatcher``);
  ``ctl2`` runs the third Sentinel (quorum 2).

Every process reaches Redis through the Sentinels (``REDIS_SENTINELS``; Celery's broker too), or with
``--redis-via route`` through an HAProxy TCP route on the data host that sends to whichever server answers
``role:master``. Clients run in the root namespace and use only the balancer's address.

Faults, in this order, on the same stack (each with runs of its own, every one accounted for as in
``bench/fault_suite.py``: the client's text against the stored answer):

- ``web_kill``: ``kill -9`` of one web process behind the balancer; streams resume on the other with
  ``Last-Event-ID``; the process is started again afterwards;
- ``worker_host_down``: ``ip link set <veth> down`` of the worker host streaming more runs (its processes stay
  alive): the reaper requeues its runs and they go on on the other host from the streamed text; the link comes
  back once they ended (the cut-off worker must not write into them then);
- ``redis_primary_kill``: SIGKILL of the Redis primary: the Sentinels promote the replica, Celery and every
  client follow; the old primary is started again afterwards (the Sentinels make it a replica);
- ``dispatcher_host_down``: the link of the dispatcher leader's host down: the standby takes over (prompts posted
  after the fault are dispatched by it).

``--secure``: every Redis, Sentinel and Postgres link uses TLS (one throwaway CA; the servers' certificate names the
hosts' addresses and every client checks it), and Redis loads the ACL file of ``manage.py redis_acl``: the web
processes, workers and dispatchers log in as their own role's user, Celery's broker as ``celery``, the replica as
``replica``, the Sentinels as ``sentinel`` (the Sentinels ask for a password of their own); ``default`` is off. The
end of the run checks it held: no plain connection to Postgres from the network, a plain or anonymous connection to
Redis refused, each role's user connected, and no command or key any role was refused (``ACL LOG`` of both servers).

Prints a Markdown table (the fault suite's columns) and notes, and exits 1 when a count is not zero, a run never
finished or a fault did not recover. Everything is torn down at the end, on an error, Ctrl-C or SIGTERM too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import psycopg
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.certificates import Certificates, make_certificates  # noqa: E402
from bench.lib.fault_servers import PG_BIN, Budget, PrivatePostgres, Supervisor, log, run_quiet  # noqa: E402
from bench.lib.processes import celery_worker_argv, guard_teardown  # noqa: E402
from bench.lib.stream_clients import (  # noqa: E402
    TERMINAL,
    Counters,
    FaultResult,
    Follow,
    account,
    counts_of,
    join_all,
    notes,
    post_prompt,
    run_clients,
    table,
    wait_for,
)

PYTHON = str(ROOT / ".venv" / "bin" / "python")
UVICORN = str(ROOT / ".venv" / "bin" / "uvicorn")
MOTO = str(ROOT / ".venv" / "bin" / "moto_server")
MODEL_DIR = ROOT / "var" / "models" / "SmolLM2-135M-Instruct"
MODEL_NAME = "SmolLM2-135M-Instruct"
MODEL_VERSION = "hosts"
STORE_URL = "s3://models/smollm2/hosts/"
STORE_CREDENTIALS = {"MODEL_STORE_ACCESS_KEY_ID": "testing", "MODEL_STORE_SECRET_ACCESS_KEY": "testing"}
"""moto accepts any credentials; these are moto's own test values."""
FAULTS = ("web_kill", "worker_host_down", "redis_primary_kill", "dispatcher_host_down")
HOSTS = {"data": 10, "web": 20, "w1": 31, "w2": 32, "ctl1": 41, "ctl2": 42}
SENTINEL_HOSTS = ("data", "web", "ctl2")
MASTER = "chat"
USERS = 12
BALANCER_PORT = 8080
WEB_PORTS = {"web1": 8001, "web2": 8002}
ROUTE_PORT = 6390
STORE_PORT = 9000
PG_PORT = 5432


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


# -- the topology ----------------------------------------------------------------------------------------------


class Topology:
    """A bridge in the root namespace and one network namespace per host, each with a veth pair into it."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.bridge = f"{prefix}br"
        self.subnet = self._free_subnet()
        self.made: list[str] = []
        self.bridge_made = False

    @staticmethod
    def _free_subnet() -> int:
        routes = sh("ip", "-4", "route").stdout
        start = os.getpid() % 200 + 20
        for n in [*range(start, 250), *range(20, start)]:
            if f"10.77.{n}." not in routes:
                return n
        raise RuntimeError("no free 10.77.N.0/24 for the topology")

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def veth(self, host: str) -> str:
        return f"{self.prefix}{host}"

    def addr(self, host: str) -> str:
        return f"10.77.{self.subnet}.{HOSTS[host]}"

    @property
    def gateway(self) -> str:
        return f"10.77.{self.subnet}.1"

    @property
    def cidr(self) -> str:
        return f"10.77.{self.subnet}.0/24"

    def exec(self, host: str) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.ns(host))

    def up(self) -> None:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.bridge_made = True
        sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for host in HOSTS:
            ns = self.ns(host)
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "link", "add", self.veth(host), "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", self.veth(host), "master", self.bridge)
            sh("ip", "link", "set", self.veth(host), "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def link(self, host: str, *, up: bool) -> None:
        """The host's network cable: its veth in the bridge set down (or up); its processes are left alone."""
        sh("ip", "link", "set", self.veth(host), "up" if up else "down")

    def down(self) -> None:
        """Every process still in a namespace of ours killed (all were started by this run), the namespaces
        deleted (their veth pairs go with them), then the bridge."""
        for ns in self.made:
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        for ns in self.made:
            sh("ip", "netns", "del", ns, check=False)
        self.made = []
        if self.bridge_made:
            sh("ip", "link", "del", self.bridge, check=False)
            self.bridge_made = False


# -- the servers on the data host ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Security:
    """``--secure``: the CA and certificate of every server, the Redis ACL file and its users' passwords."""

    certs: Certificates
    acl_file: Path
    passwords: dict[str, str]
    """Each ACL user's password: the roles (web, worker, dispatcher, celery), replica, sentinel and ``harness``
    (this script's own checks; every command and key)."""
    sentinel_password: str
    """What the Sentinels themselves ask for (``requirepass``; they log in to each other with it)."""

    @classmethod
    def make(cls, root: Path, topo: Topology, env: dict[str, str]) -> Security:
        folder = root / "tls"
        certs = make_certificates(folder, addresses=[topo.addr(host) for host in HOSTS])
        passwords = {name: secrets.token_hex(16) for name in ("web", "worker", "dispatcher", "celery")}
        passwords |= {name: secrets.token_hex(16) for name in ("replica", "sentinel", "harness")}
        acl_file = folder / "users.acl"
        given = [f"--password={name}={passwords[name]}" for name in passwords if name != "harness"]
        run_quiet([PYTHON, str(ROOT / "manage.py"), "redis_acl", "--out", str(acl_file), *given], env=env)
        with acl_file.open("a") as handle:
            handle.write(f"user harness on >{passwords['harness']} ~* &* +@all\n")
        return cls(certs, acl_file, passwords, secrets.token_hex(16))

    def tls_listen(self, port: int) -> str:
        """A server's TLS port (no plain one); its own links (replication, a Sentinel's) use TLS too."""
        return (
            f"port 0\ntls-port {port}\ntls-cert-file {self.certs.cert}\ntls-key-file {self.certs.key}\n"
            f"tls-ca-cert-file {self.certs.ca}\ntls-auth-clients no\ntls-replication yes\n"
        )

    def server_auth(self) -> str:
        return f"aclfile {self.acl_file}\nmasteruser replica\nmasterauth {self.passwords['replica']}\n"

    def sentinel_auth(self) -> str:
        return (
            f"requirepass {self.sentinel_password}\nsentinel auth-user {MASTER} sentinel\n"
            f"sentinel auth-pass {MASTER} {self.passwords['sentinel']}\n"
        )

    def tls_client(self) -> dict[str, object]:
        return {"ssl": True, "ssl_ca_certs": str(self.certs.ca), "ssl_check_hostname": True}

    def role_env(self, role: str) -> dict[str, str]:
        """A process's Redis variables: its role's user on ``rediss://`` through TLS Sentinels, Celery's broker as
        ``celery``."""
        return {
            "REDIS_URL": f"rediss://{role}:{self.passwords[role]}@sentinel/0",
            "CELERY_BROKER_URL": f"rediss://celery:{self.passwords['celery']}@sentinel/1",
            "REDIS_TLS_CA_FILE": str(self.certs.ca),
            "REDIS_SENTINEL_TLS": "1",
            "REDIS_SENTINEL_PASSWORD": self.sentinel_password,
        }


REDIS_BASE = 'protected-mode no\nsave ""\nappendonly yes\nappendfsync everysec\nmaxclients 2000\n'


class DataHost:
    """Redis primary and replica, the Sentinels (on three hosts), the moto S3 server; Postgres is separate."""

    def __init__(self, topo: Topology, supervisor: Supervisor, root: Path, security: Security | None = None) -> None:
        self.topo = topo
        self.supervisor = supervisor
        self.root = root
        self.security = security
        self.ip = topo.addr("data")
        self.servers = {"redis-a": 6379, "redis-b": 6380}

    def login(self, *, sentinel: bool = False) -> dict[str, object]:
        """How this script's own clients log in: nothing, or with ``--secure`` TLS and ``harness`` (a Sentinel:
        its password)."""
        if self.security is None:
            return {}
        if sentinel:
            return {**self.security.tls_client(), "password": self.security.sentinel_password}
        return {**self.security.tls_client(), "username": "harness", "password": self.security.passwords["harness"]}

    def connect(self, host: str, port: int, *, sentinel: bool = False, **options: object) -> redis.Redis:
        """A client of one server or Sentinel, logged in as :meth:`login` says."""
        return redis.Redis(host=host, port=port, **options, **self.login(sentinel=sentinel))  # type: ignore[arg-type]

    def pings(self, host: str, port: int, *, sentinel: bool = False) -> bool:
        try:
            return bool(self.connect(host, port, sentinel=sentinel, socket_timeout=1, socket_connect_timeout=1).ping())
        except redis.RedisError:
            return False

    def _redis_conf(self, name: str, body: str) -> Path:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        conf = folder / "redis.conf"
        conf.write_text(body + f"dir {folder}\n")
        return conf

    def start_redis(self, name: str) -> None:
        port = self.servers[name]
        conf = self.root / name / "redis.conf"
        args: list[str] = []
        if conf.exists():
            # A restart of the old primary: as a replica of the current one from its first second. Its own config
            # has no replicaof (the Sentinels could not rewrite it: it was dead), and started as it is it would
            # serve as a primary until the Sentinels turn it (what a client routed by role:master writes there
            # meanwhile is lost: the split-brain window --redis-via route showed).
            probe = self.connect(self.ip, 26379, sentinel=True, socket_timeout=2, decode_responses=True)
            host, current = probe.sentinel_get_master_addr_by_name(MASTER)  # type: ignore[misc]
            if int(current) != port:
                args = ["--replicaof", str(host), str(current)]
        else:
            extra = "" if name == "redis-a" else f"replicaof {self.ip} {self.servers['redis-a']}\n"
            if self.security is None:
                listen = f"port {port}\n"
            else:
                listen = self.security.tls_listen(port) + self.security.server_auth()
            self._redis_conf(name, f"{listen}bind {self.ip}\n{REDIS_BASE}{extra}")
        self.supervisor.spawn(name, [*self.topo.exec("data"), "redis-server", str(conf), *args], dict(os.environ))
        wait_for(lambda: self.pings(self.ip, port), deadline=time.monotonic() + 20, step=0.1)
        if not self.pings(self.ip, port):
            raise RuntimeError(f"{name} did not start: {self.supervisor.log_text(name)[-500:]}")

    def start_sentinels(self) -> None:
        for host in SENTINEL_HOSTS:
            name = f"sentinel-{host}"
            addr = self.topo.addr(host)
            if self.security is None:
                listen = "port 26379\n"
            else:
                listen = self.security.tls_listen(26379) + self.security.sentinel_auth()
            conf = self._redis_conf(
                name,
                f"{listen}bind {addr}\nprotected-mode no\n"
                f"sentinel monitor {MASTER} {self.ip} {self.servers['redis-a']} 2\n"
                f"sentinel down-after-milliseconds {MASTER} 1500\nsentinel failover-timeout {MASTER} 10000\n",
            )
            self.supervisor.spawn(
                name, [*self.topo.exec(host), "redis-server", str(conf), "--sentinel"], dict(os.environ)
            )
        for host in SENTINEL_HOSTS:
            up = lambda h=host: self.pings(self.topo.addr(h), 26379, sentinel=True)  # type: ignore[misc]  # noqa: E731
            if not wait_for(up, deadline=time.monotonic() + 20):
                raise RuntimeError(f"the Sentinel on {host} did not start")
        # A failover needs the Sentinels to know each other and the replica.
        probe = self.connect(self.ip, 26379, sentinel=True, socket_timeout=2, decode_responses=True)

        def ready() -> bool:
            try:
                master = probe.sentinel_master(MASTER)
            except redis.RedisError:
                return False
            if not isinstance(master, dict):
                return False
            return int(master.get("num-other-sentinels", 0)) >= 2 and int(master.get("num-slaves", 0)) >= 1

        if not wait_for(ready, deadline=time.monotonic() + 30, step=0.2):
            raise RuntimeError("the Sentinels did not find each other and the replica in 30 s")

    @property
    def sentinels(self) -> str:
        return ",".join(f"{self.topo.addr(h)}:26379" for h in SENTINEL_HOSTS)

    def primary(self) -> str:
        """The supervisor name of the current primary, as the Sentinels say."""
        probe = self.connect(self.ip, 26379, sentinel=True, socket_timeout=2, decode_responses=True)
        _host, port = probe.sentinel_get_master_addr_by_name(MASTER)  # type: ignore[misc]
        return next(name for name, p in self.servers.items() if p == int(port))

    def client(self) -> redis.Redis:
        """A client of the current primary (the suite's own checks)."""
        from redis.sentinel import Sentinel

        addresses = [(self.topo.addr(h), 26379) for h in SENTINEL_HOSTS]
        sentinel = Sentinel(
            addresses, sentinel_kwargs={"socket_timeout": 2, **self.login(sentinel=True)}, socket_timeout=2
        )
        return sentinel.master_for(MASTER, socket_timeout=3, decode_responses=True, **self.login())

    def start_route(self) -> None:
        """``--redis-via route``: HAProxy on the data host, a TCP route to whichever server says role:master."""
        servers = "\n".join(
            f"    server {name} {self.ip}:{port} check inter 300ms fall 1 rise 1" for name, port in self.servers.items()
        )
        config = self.root / "redis-route.cfg"
        config.write_text(
            "global\n    maxconn 4000\ndefaults\n    mode tcp\n    timeout connect 2s\n"
            "    timeout client 1h\n    timeout server 1h\n"
            f"frontend redis\n    bind {self.ip}:{ROUTE_PORT}\n    default_backend primary\n"
            "backend primary\n    option tcp-check\n    tcp-check send PING\\r\\n\n    tcp-check expect string +PONG\n"
            "    tcp-check send info\\ replication\\r\\n\n    tcp-check expect string role:master\n"
            "    tcp-check send QUIT\\r\\n\n    tcp-check expect string +OK\n"
            "    default-server on-marked-down shutdown-sessions\n"
            f"{servers}\n"
        )
        self.supervisor.spawn(
            "redis-route", [*self.topo.exec("data"), "haproxy", "-db", "-f", str(config)], dict(os.environ)
        )
        if not wait_for(lambda: self.pings(self.ip, ROUTE_PORT), deadline=time.monotonic() + 20, step=0.2):
            raise RuntimeError("the Redis route did not answer")

    def start_store(self) -> str:
        argv = [*self.topo.exec("data"), MOTO, "-H", self.ip, "-p", str(STORE_PORT)]
        self.supervisor.spawn("moto", argv, dict(os.environ))
        url = f"http://{self.ip}:{STORE_PORT}"

        def answers() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(url, timeout=2).status_code < 500
            return False

        if not wait_for(answers, deadline=time.monotonic() + 30, step=0.2):
            raise RuntimeError(f"the moto server did not answer: {self.supervisor.log_text('moto')[-500:]}")
        return url


# -- the stack -------------------------------------------------------------------------------------------------

# The simulated engine at the fault suite's pace: runs of a few seconds, deltas of two tokens.
BASE_ENV = {
    "ENGINE_BACKEND": "simulated",
    "SIM_STEP_BASE_S": "0.05",
    "SIM_STEP_PER_SEQ_S": "0.0",
    "STREAM_FLUSH_MAX_TOKENS": "2",
    "STREAM_STATUS_POLL_S": "0.2",
    "STREAM_KEEPALIVE_S": "1",
    "LOG_LEVEL": "INFO",
}

HAPROXY_WEB = """\
global
    maxconn 2000
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout check 2s
    retries 3
    option redispatch
frontend web
    bind {bind}
    default_backend webs
backend webs
    balance roundrobin
    option httpchk GET /healthz
    http-response set-header X-Served-By %[srv_name]
{servers}
"""


@dataclass
class Stack:
    topo: Topology
    supervisor: Supervisor
    data: DataHost
    root: Path
    env: dict[str, str]
    slots: int
    workers: dict[str, str] = field(default_factory=dict)  # host -> Celery worker name

    def env_of(self, role: str) -> dict[str, str]:
        """A role's environment: with ``--secure`` its own Redis user (the base environment has the web's)."""
        security = self.data.security
        return self.env if security is None else dict(self.env, **security.role_env(role))

    @property
    def base_url(self) -> str:
        return f"http://{self.topo.addr('web')}:{BALANCER_PORT}"

    def start_web(self, name: str) -> None:
        argv = [*self.topo.exec("web"), UVICORN, "chatproject.asgi:application", "--host", "127.0.0.1"]
        argv += ["--port", str(WEB_PORTS[name]), "--no-access-log", "--timeout-graceful-shutdown", "2"]
        self.supervisor.spawn(name, argv, self.env_of("web"))

    def web_up(self, name: str) -> bool:
        """Whether the web process answers /readyz with 200 (asked from inside the web host): the tokenizers of the
        served model and of the default deployment's copy loaded (which its start does before the port opens)."""
        done = subprocess.run(
            [*self.topo.exec("web"), PYTHON, "-c", _HEALTH.format(port=WEB_PORTS[name])], capture_output=True
        )
        return done.returncode == 0

    def start_balancer(self) -> None:
        servers = "\n".join(
            f"    server {name} 127.0.0.1:{port} check inter 300ms fall 3 rise 2" for name, port in WEB_PORTS.items()
        )
        config = self.root / "haproxy-web.cfg"
        config.write_text(HAPROXY_WEB.format(bind=f"{self.topo.addr('web')}:{BALANCER_PORT}", servers=servers))
        self.supervisor.spawn(
            "balancer", [*self.topo.exec("web"), "haproxy", "-db", "-f", str(config)], dict(os.environ)
        )

    def start_worker(self, host: str, store_url: str) -> None:
        name = f"{host}@{self.topo.prefix}"
        env = dict(
            self.env_of("worker"),
            ENGINE_MAX_NUM_SEQS=str(self.slots),
            WORKER_DEPLOYMENT=f"{MODEL_NAME}@{MODEL_VERSION}",
            MODEL_CACHE_MODE="per_host",
            MODEL_CACHE_DIR=str(self.root / f"{host}-cache"),
            MODEL_STORE_ENDPOINT_URL=store_url,
            **STORE_CREDENTIALS,
            MODEL_STORE_REGION="us-east-1",
            MODEL_STORE_TRANSFER_CHUNK_MB="1024",
        )
        argv = [*self.topo.exec(host), *celery_worker_argv(name=name, concurrency=self.slots)]
        self.supervisor.spawn(host, argv, env)
        self.workers[host] = name

    def start_dispatcher(self, host: str) -> None:
        self.supervisor.spawn(
            host, [*self.topo.exec(host), PYTHON, str(ROOT / "manage.py"), "run_dispatcher"], self.env_of("dispatcher")
        )

    def wait_workers(self, *, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for host in self.workers:
            while "ready." not in self.supervisor.log_text(host):
                if not self.supervisor.alive(host) or time.monotonic() > deadline:
                    raise RuntimeError(f"worker {host} did not start: {_tail(self.supervisor.log_text(host))}")
                time.sleep(0.3)

    def host_of_worker(self, worker: str) -> str:
        return next((h for h, n in self.workers.items() if n == worker), "?")

    def leader_host(self) -> str:
        """The host of the dispatcher holding the leader lock (its token against the dispatchers' logs)."""
        from scheduling.store import LEADER_KEY

        token = str(self.data.client().get(LEADER_KEY) or "")
        for host in ("ctl1", "ctl2"):
            if token and f"dispatcher {token[:8]} started" in self.supervisor.log_text(host):
                return host
        raise RuntimeError(f"no dispatcher holds the leader lock ({token!r})")


_HEALTH = (
    "import sys, urllib.request\n"
    "try:\n"
    "    sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:{port}/readyz', timeout=2).status == 200 else 1)\n"
    "except Exception:\n"
    "    sys.exit(1)\n"
)


def _tail(text: str, n: int = 600) -> str:
    return text[-n:].replace("\n", " | ")


def create_users(env: dict[str, str], count: int) -> list[str]:
    """``count`` pro users with API tokens and limits no fault reaches (the stack is shared by every fault)."""
    code = (
        "import json\n"
        "from accounts.models import Tier, User, UserLimitOverride\n"
        "from rest_framework.authtoken.models import Token\n"
        "pro = Tier.objects.get(name='pro')\n"
        "tokens = []\n"
        f"for i in range({count}):\n"
        "    user, _ = User.objects.get_or_create(username=f'hosts-{i}', defaults={'tier': pro})\n"
        "    UserLimitOverride.objects.update_or_create(user=user, defaults=dict(max_concurrent_runs=100,\n"
        "        bucket_capacity_tokens=1_000_000_000, bucket_refill_per_s=1_000_000, note='hosts test'))\n"
        "    tokens.append(Token.objects.get_or_create(user=user)[0].key)\n"
        "print('TOKENS=' + json.dumps(tokens))\n"
    )
    out = run_quiet([PYTHON, str(ROOT / "manage.py"), "shell", "-c", code], env=env)
    line = next(line for line in out.splitlines() if line.startswith("TOKENS="))
    return list(json.loads(line.removeprefix("TOKENS=")))


# -- the faults ------------------------------------------------------------------------------------------------


@dataclass
class Context:
    stack: Stack
    tokens: list[str]
    budget: Budget
    quick: bool
    posted: int = 0

    def wave(self, counters: Counters, n: int, *, deadline: float) -> list[Follow]:
        first = self.posted
        self.posted += n
        with ThreadPoolExecutor(max_workers=8) as pool:
            futures = [
                pool.submit(
                    post_prompt,
                    self.stack.base_url,
                    self.tokens[i % len(self.tokens)],
                    counters,
                    deadline=deadline,
                    index=i,
                )
                for i in range(first, first + n)
            ]
            return [f.result() for f in futures]


def wait_ended(ctx: Context, follows: list[Follow], counters: Counters, *, deadline: float) -> None:
    """Until Postgres has every run terminal (or the deadline)."""

    def all_terminal() -> bool:
        for f in follows:
            try:
                answer = httpx.get(
                    f"{ctx.stack.base_url}/api/runs/{f.run_id}",
                    headers={"Authorization": f"Token {f.token}"},
                    timeout=5,
                )
            except httpx.HTTPError:
                return False
            counters.saw(answer, "GET api/runs/N")
            if answer.status_code != 200 or answer.json()["status"] not in TERMINAL:
                return False
        return True

    wait_for(all_terminal, deadline=deadline, step=0.5)


def finish(ctx: Context, result: FaultResult, follows: list[Follow], counters: Counters, threads: list) -> None:  # type: ignore[type-arg]
    """The clients joined, the runs ended, every run accounted for, and what the clients saw in the notes."""
    join_all(threads, ctx.budget.until(90))
    wait_ended(ctx, follows, counters, deadline=ctx.budget.until(30))
    with ThreadPoolExecutor(max_workers=8) as pool:
        result.add(
            list(pool.map(lambda f: account(ctx.stack.base_url, f, counters, deadline=ctx.budget.until(60)), follows))
        )
    result.five_xx = len(counters.five_xx)
    if counters.five_xx:
        result.notes.append("5xx answers: " + counts_of(counters.five_xx))
    errors: list[str] = []
    for f in follows:
        errors += [e for e in f.errors if e not in errors]
    if errors:
        result.notes.append("client errors (first distinct): " + "; ".join(errors[:3]))
    never = [f.run_id for f in follows if f.ended not in ("done", "204")]
    if never:
        result.notes.append(f"runs whose client never saw the end: {never}")
    result.summarize_outcomes()


def started_streaming(follows: list[Follow], after: float) -> list[float]:
    """For each client: when its text flowed again after the fault at ``after`` (monotonic; inf if never): the
    delta that ends its longest pause from ``after`` on (an entry already on its way when the fault hit does not
    count as recovered), or its end when no delta came after ``after``."""
    out = []
    for f in follows:
        times = [t for t in f.delta_times if t > after]
        if not times:
            out.append(f.ended_at if f.ended_at is not None and f.ended_at > after else float("inf"))
            continue
        previous, best, resumed = after, -1.0, times[0]
        for t in times:
            if t - previous > best:
                best, resumed = t - previous, t
            previous = t
        out.append(resumed)
    return out


def fault_web_kill(ctx: Context, result: FaultResult) -> None:
    stack = ctx.stack
    n = 8 if ctx.quick else 16
    counters = Counters()
    deadline = ctx.budget.until(150)
    follows = ctx.wave(counters, n, deadline=deadline)
    threads = run_clients(stack.base_url, follows, counters, deadline=deadline)
    wait_for(lambda: all(f.deltas >= 2 for f in follows), deadline=ctx.budget.until(40))
    active = [f for f in follows if not f.ended]
    killed_at = time.monotonic()
    stack.supervisor.kill("web1")
    log(f"web_kill: killed web1 (kill -9) with {len(active)} streams open")
    wait_for(lambda: all(f.ended or f.events_after(killed_at) for f in active), deadline=ctx.budget.until(60))
    back = started_streaming(active, killed_at)
    result.recover_s = max(back) - killed_at if back and max(back) < float("inf") else None
    result.recover_what = "kill to every client streaming again (through the balancer, on web2)"
    drops = sum(f.drops for f in active)
    result.notes.append(
        f"{len(active)} streams open at the kill; {drops} connections cut; "
        f"{sum(1 for t in back if t < float('inf'))}/{len(active)} clients streaming again"
    )
    finish(ctx, result, follows, counters, threads)
    stack.start_web("web1")
    wait_for(lambda: stack.web_up("web1"), deadline=ctx.budget.until(60), step=0.5)


def fault_worker_host_down(ctx: Context, result: FaultResult) -> None:
    stack = ctx.stack
    n = 6 if ctx.quick else 10
    counters = Counters()
    deadline = ctx.budget.until(180)
    follows = ctx.wave(counters, n, deadline=deadline)
    threads = run_clients(stack.base_url, follows, counters, deadline=deadline)
    wait_for(
        lambda: len({f.worker for f in follows if f.deltas >= 3}) == 2 and sum(f.deltas >= 3 for f in follows) >= n - 1,
        deadline=ctx.budget.until(40),
    )
    on = {h: [f for f in follows if f.worker == w and not f.ended] for h, w in stack.workers.items()}
    victim = max(on, key=lambda h: len(on[h]))
    affected = on[victim]
    down_at = time.monotonic()
    stack.topo.link(victim, up=False)
    log(f"worker_host_down: {victim}'s link down with {len(affected)} of its runs streaming")
    try:
        wait_for(lambda: all(f.ended for f in affected), deadline=ctx.budget.until(90), step=0.2)
    finally:
        back = started_streaming(affected, down_at)
        stack.topo.link(victim, up=True)
    up_at = time.monotonic()
    result.recover_s = max(back) - down_at if back and max(back) < float("inf") else None
    result.recover_what = "link down to every affected run streaming again (on the other host)"
    moved = sum(1 for f in affected if f.worker != stack.workers[victim])
    result.notes.append(
        f"{victim} cut off for {up_at - down_at:.1f} s with {len(affected)} runs streaming on it: {moved} went on "
        f"on the other host ({sum(f.resets for f in affected)} resets seen by their clients); its worker process "
        f"was alive throughout: {stack.supervisor.alive(victim)}"
    )
    time.sleep(3.0)  # the link is back: the cut-off worker must not write into the runs that moved
    finish(ctx, result, follows, counters, threads)
    reasons = re.findall(
        r"event=requeued .*?reason=(\w+)", stack.supervisor.log_text("ctl1") + stack.supervisor.log_text("ctl2")
    )
    result.notes.append("the reaper requeued " + (counts_of(reasons) if reasons else "nothing"))


def fault_redis_primary_kill(ctx: Context, result: FaultResult) -> None:
    stack = ctx.stack
    n = 8 if ctx.quick else 16
    counters = Counters()
    deadline = ctx.budget.until(180)
    follows = ctx.wave(counters, n, deadline=deadline)
    threads = run_clients(stack.base_url, follows, counters, deadline=deadline)
    wait_for(lambda: sum(f.deltas >= 3 for f in follows) >= n - 1, deadline=ctx.budget.until(40))
    live = [f for f in follows if not f.ended and f.deltas]
    victim = stack.data.primary()
    killed_at = time.monotonic()
    stack.supervisor.kill(victim)
    log(f"redis_primary_kill: SIGKILL of {victim} (the primary) with {len(live)} runs streaming")
    promoted = wait_for(lambda: _primary_is_not(stack.data, victim), deadline=ctx.budget.until(30), step=0.1)
    promoted_at = time.monotonic()
    probe = ctx.wave(counters, 4, deadline=ctx.budget.until(60))
    follows += probe
    threads += run_clients(stack.base_url, probe, counters, deadline=deadline)
    wait_for(lambda: all(f.ended or f.events_after(promoted_at) for f in live), deadline=ctx.budget.until(60))
    back = started_streaming(live, killed_at)
    result.recover_s = max(back) - killed_at if back and max(back) < float("inf") else None
    result.recover_what = "kill to every stream live at it delivering again"
    result.notes.append(
        f"{victim} killed; the Sentinels promoted the replica "
        + (f"{promoted_at - killed_at:.1f} s after the kill" if promoted else "NOT within 30 s")
        + f"; {len(live)} runs were streaming, 4 prompts posted after the promotion"
    )
    finish(ctx, result, follows, counters, threads)
    dead = [h for h in stack.workers if not stack.supervisor.alive(h)]
    if dead:
        result.notes.append(f"workers that died: {', '.join(dead)}")
    stack.data.start_redis(victim)  # back as a replica of the new primary (the Sentinels reconfigure it)
    text = "".join(stack.supervisor.log_text(h) for h in stack.workers)
    lost = len(set(re.findall(r"run (\d+): its stream lost entries", text)))
    if lost:
        result.notes.append(f"{lost} runs' streams lost entries with the primary and were resent after a reset")


def _primary_is_not(data: DataHost, name: str) -> bool:
    try:
        return data.primary() != name
    except (redis.RedisError, StopIteration):
        return False


def fault_dispatcher_host_down(ctx: Context, result: FaultResult) -> None:
    stack = ctx.stack
    n = 4 if ctx.quick else 8
    counters = Counters()
    deadline = ctx.budget.until(180)
    follows = ctx.wave(counters, n, deadline=deadline)
    threads = run_clients(stack.base_url, follows, counters, deadline=deadline)
    wait_for(lambda: sum(f.deltas >= 2 for f in follows) >= n, deadline=ctx.budget.until(40))
    leader = stack.leader_host()
    down_at = time.monotonic()
    stack.topo.link(leader, up=False)
    log(f"dispatcher_host_down: {leader}'s link down (the leader's host)")
    try:
        probe = ctx.wave(counters, 6 if ctx.quick else 12, deadline=ctx.budget.until(60))
        follows += probe
        threads += run_clients(stack.base_url, probe, counters, deadline=deadline)
        wait_for(lambda: all(f.deltas or f.ended for f in probe), deadline=ctx.budget.until(60), step=0.1)
        firsts = [min([*f.delta_times, f.ended_at or float("inf")]) for f in probe]
        result.recover_s = max(firsts) - down_at if firsts and max(firsts) < float("inf") else None
        result.recover_what = "link down to the first token of every prompt posted after it (dispatched by the standby)"
        new_leader = ""
        with contextlib.suppress(RuntimeError, redis.RedisError):
            new_leader = stack.leader_host()
        result.notes.append(
            f"{leader} (the leader) cut off; {len(probe)} prompts posted after it; the lock is now held by "
            f"{new_leader or 'nobody'}"
        )
        if new_leader == leader or not new_leader:
            result.recover_s = None
        join_all(threads, ctx.budget.until(90))
    finally:
        stack.topo.link(leader, up=True)
    finish(ctx, result, follows, counters, threads)


FAULT_FUNCTIONS: dict[str, Callable[[Context, FaultResult], None]] = {
    "web_kill": fault_web_kill,
    "worker_host_down": fault_worker_host_down,
    "redis_primary_kill": fault_redis_primary_kill,
    "dispatcher_host_down": fault_dispatcher_host_down,
}


# -- set-up ----------------------------------------------------------------------------------------------------


def missing_tools() -> list[str]:
    missing = [tool for tool in ("ip", "haproxy", "redis-server", "runuser") if shutil.which(tool) is None]
    if not (PG_BIN / "initdb").exists():
        missing.append(f"{PG_BIN}/initdb")
    if os.geteuid() != 0:
        missing.append("root (ip netns)")
    return missing


def build(
    topo: Topology,
    supervisor: Supervisor,
    root: Path,
    postgres: PrivatePostgres,
    *,
    quick: bool,
    via: str,
    secure: bool,
) -> tuple[Stack, dict[str, str]]:
    t0 = time.monotonic()
    topo.up()
    log(f"topology: bridge {topo.bridge} {topo.gateway}/24, namespaces {', '.join(topo.made)}")
    env = {
        k: v for k, v in os.environ.items() if k not in ("DJANGO_ALLOW_ASYNC_UNSAFE",) and not k.startswith("REDIS_")
    }
    env.pop("CELERY_BROKER_URL", None)
    env.update(BASE_ENV)
    env.update(
        SIM_OUTPUT_TOKENS="100" if quick else "160",
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        NO_PROXY="*",
        DJANGO_ALLOWED_HOSTS=f"{topo.addr('web')},127.0.0.1,localhost",
    )
    security = Security.make(root, topo, env) if secure else None
    if security is not None:
        postgres.tls = security.certs  # hostssl only, verify-full in its URL
    env["DATABASE_URL"] = postgres.url
    postgres.init()
    data = DataHost(topo, supervisor, root, security)
    data.start_redis("redis-a")
    data.start_redis("redis-b")
    data.start_sentinels()
    if via == "route":
        data.start_route()
        env.update(REDIS_URL=f"redis://{data.ip}:{ROUTE_PORT}/0", CELERY_BROKER_URL=f"redis://{data.ip}:{ROUTE_PORT}/1")
    else:
        env.update(REDIS_SENTINELS=data.sentinels, REDIS_SENTINEL_MASTER=MASTER)
        if security is None:
            env.update(REDIS_URL="redis://sentinel/0", CELERY_BROKER_URL="redis://sentinel/1")
        else:  # the set-up commands (an operator's, on the web host) run as the web's user
            env.update(security.role_env("web"))
    store_url = data.start_store()
    tls = " over TLS, each role its own Redis user" if secure else ""
    log(f"data host up ({time.monotonic() - t0:.0f} s): Postgres, Redis primary+replica, 3 Sentinels, S3 store{tls}")
    run_quiet([PYTHON, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"], env=env, timeout=300)
    run_quiet([PYTHON, str(ROOT / "manage.py"), "prepare_model"], env=env, timeout=300)
    store_env = dict(
        env,
        MODEL_STORE_ENDPOINT_URL=store_url,
        **STORE_CREDENTIALS,
        MODEL_STORE_REGION="us-east-1",
        MODEL_STORE_TRANSFER_CHUNK_MB="1024",
    )
    pushed = run_quiet(
        [PYTHON, str(ROOT / "manage.py"), "model_store_push", str(MODEL_DIR), STORE_URL, "--create-bucket"],
        env=store_env,
        timeout=300,
    )
    checksum = (re.findall(r"sha256: (\w+)", pushed) or [""])[0]
    # Registered on the web host (its cache gets the copy whose tokenizer the web processes count with: see
    # docs/deployments.md); all the traffic and the default go to it, none to the packaged version.
    run_quiet(
        [
            *topo.exec("web"),
            *(PYTHON, str(ROOT / "manage.py"), "deployment_register", MODEL_NAME, MODEL_VERSION),
            *("--source", STORE_URL, "--weight", "100", "--default"),
        ],
        env=dict(store_env, MODEL_CACHE_DIR=str(root / "web-cache")),
        timeout=300,
    )
    code = (
        "from deployments.models import ModelDeployment\n"
        f"ModelDeployment.objects.filter(name={MODEL_NAME!r}).exclude(version={MODEL_VERSION!r})"
        ".update(traffic_weight=0)\n"
    )
    run_quiet([PYTHON, str(ROOT / "manage.py"), "shell", "-c", code], env=store_env)
    log(f"model pushed to {STORE_URL} and registered as {MODEL_NAME}@{MODEL_VERSION} ({time.monotonic() - t0:.0f} s)")
    stack = Stack(topo, supervisor, data, root, env, slots=8)
    for host in ("w1", "w2"):
        stack.start_worker(host, store_url)
    stack.start_dispatcher("ctl1")
    for name in WEB_PORTS:
        stack.start_web(name)
    stack.start_balancer()
    wait_for(lambda: "started" in supervisor.log_text("ctl1"), deadline=time.monotonic() + 60, step=0.2)
    time.sleep(1.0)  # ctl1 takes the lock first: the leader; ctl2 is the standby
    stack.start_dispatcher("ctl2")
    stack.wait_workers(timeout_s=240)
    for name in WEB_PORTS:
        if not wait_for(lambda n=name: stack.web_up(n), deadline=time.monotonic() + 90, step=0.5):  # type: ignore[misc]
            raise RuntimeError(f"{name} did not answer: {_tail(supervisor.log_text(name))}")

    last: list[str] = [""]

    def balanced() -> bool:
        try:
            answer = httpx.get(stack.base_url + "/readyz", timeout=3)
        except httpx.HTTPError as exc:
            last[0] = repr(exc)
            return False
        last[0] = f"{answer.status_code} {answer.text[:300]}"
        return answer.status_code == 200

    if not wait_for(balanced, deadline=time.monotonic() + 60, step=0.5):
        raise RuntimeError(f"the balancer did not answer /readyz with 200: {last[0]}")
    caches: dict[str, str] = {"checksum": checksum}
    for host in stack.workers:
        lines = [line for line in supervisor.log_text(host).splitlines() if "filled and verified" in line]
        caches[host] = lines[0].split("deployments.host_cache ", 1)[-1] if lines else ""
    log(f"stack up in {time.monotonic() - t0:.0f} s")
    return stack, caches


def check_security(stack: Stack, postgres: PrivatePostgres) -> dict[str, object]:
    """``--secure``, at the end of the run with every process still up: did it hold? Postgres: how many sessions
    from the network use TLS and how many do not, and whether a plain login is refused; Redis: a plain and an
    anonymous connection refused, the users the current primary's clients logged in as, and every ``ACL LOG``
    entry of both servers (a command or key some role was refused)."""
    data = stack.data
    counts = postgres.query(
        "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) FROM pg_stat_activity a "
        "JOIN pg_stat_ssl s USING (pid) WHERE a.client_addr IS NOT NULL"
    ).split("|")
    plain_url = f"postgres://chat:chat@{postgres.host}:{postgres.port}/{postgres.database}?sslmode=disable"
    try:
        psycopg.connect(plain_url, connect_timeout=5).close()
        pg_plain_refused = ""
    except psycopg.Error as exc:
        pg_plain_refused = str(exc).strip().splitlines()[-1][:160]
    primary_port = data.servers[data.primary()]

    def refused(client: redis.Redis) -> str:
        try:
            client.ping()
        except redis.RedisError as exc:
            return f"{type(exc).__name__}: {exc}"[:160]
        finally:
            client.close()
        return ""

    plain = redis.Redis(host=data.ip, port=primary_port, socket_timeout=2, socket_connect_timeout=2)
    security = data.security
    assert security is not None
    anonymous = redis.Redis(host=data.ip, port=primary_port, socket_timeout=2, **security.tls_client())  # type: ignore[arg-type]
    primary = data.connect(data.ip, primary_port, socket_timeout=3, decode_responses=True)
    users = sorted({str(c.get("user")) for c in primary.client_list()})
    denied: list[str] = []
    for name, port in data.servers.items():
        with contextlib.suppress(redis.RedisError):
            for entry in data.connect(data.ip, port, socket_timeout=3, decode_responses=True).acl_log():
                denied.append(f"{name}: {entry.get('username')} {entry.get('reason')} {entry.get('object')}")
    report: dict[str, object] = {
        "postgres_tls_sessions": int(counts[0] or 0),
        "postgres_plain_sessions": int(counts[1] or 0) if len(counts) > 1 else -1,
        "postgres_plain_login_refused": pg_plain_refused,
        "redis_plain_refused": refused(plain),
        "redis_anonymous_refused": refused(anonymous),
        "redis_users": users,
        "redis_acl_denied": denied,
    }
    report["ok"] = bool(
        report["postgres_tls_sessions"]
        and report["postgres_plain_sessions"] == 0
        and pg_plain_refused
        and report["redis_plain_refused"]
        and report["redis_anonymous_refused"]
        and {"web", "worker", "dispatcher", "celery"} <= set(users)
        and not denied
    )
    return report


# -- main ------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fault", default="all", help=f"comma-separated, of {', '.join(FAULTS)} (default all)")
    parser.add_argument("--quick", action="store_true", help="fewer runs and shorter answers (CI)")
    parser.add_argument("--redis-via", choices=("sentinel", "route"), default="sentinel")
    parser.add_argument(
        "--secure", action="store_true", help="TLS on every Redis, Sentinel and Postgres link; a Redis user per role"
    )
    parser.add_argument("--max-seconds", type=float, default=900, help="bound on the whole test (default 900)")
    parser.add_argument("--log-dir", type=Path, default=ROOT / "artifacts" / "hosts-test")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    faults = list(FAULTS) if args.fault == "all" else [f.strip() for f in args.fault.split(",") if f.strip()]
    unknown = [f for f in faults if f not in FAULT_FUNCTIONS]
    if unknown:
        parser.error(f"unknown fault(s): {', '.join(unknown)}")
    if args.secure and args.redis_via == "route":
        parser.error("--secure needs --redis-via sentinel (the route's health check speaks plain Redis)")
    missing = missing_tools()
    if missing:
        print(f"hosts test: missing {', '.join(missing)} (scripts/hosts-test.sh installs the tools)", file=sys.stderr)
        return 2

    started = time.monotonic()
    budget = Budget(args.max_seconds)
    shutil.rmtree(args.log_dir, ignore_errors=True)
    supervisor = Supervisor(args.log_dir)
    root = Path(tempfile.mkdtemp(prefix="hosts-test-"))
    root.chmod(0o755)  # the postgres user must reach its directory inside
    topo = Topology(f"ht{os.getpid() % 100000}")
    postgres = PrivatePostgres(
        root, host=topo.addr("data"), port=PG_PORT, clients=topo.cidr, prefix=topo.exec("data"), database="hosts_test"
    )
    results: list[FaultResult] = []
    caches: dict[str, str] = {}
    security: dict[str, object] = {}
    cleaned = threading.Lock()

    def cleanup() -> None:
        if not cleaned.acquire(blocking=False):
            return
        for name in [n for n in list(supervisor.procs) if not n.startswith(("redis", "sentinel", "moto"))]:
            supervisor.stop(name, grace_s=5)  # the clients of the servers first, then the servers
        supervisor.stop_all()
        postgres.stop()
        topo.down()
        shutil.rmtree(root, ignore_errors=True)

    timer = guard_teardown(cleanup, after_s=args.max_seconds + 90, log=log)
    failed_setup = ""
    try:
        stack, caches = build(
            topo, supervisor, root, postgres, quick=args.quick, via=args.redis_via, secure=args.secure
        )
        for host in ("w1", "w2"):
            log(f"{host}: {caches[host] or 'its cache was NOT filled from the store'}")
        tokens = create_users(stack.env, USERS)
        ctx = Context(stack, tokens, budget, args.quick)
        for fault in faults:
            result = FaultResult(fault=fault)
            results.append(result)
            if budget.left() < 40:
                result.skipped = f"{budget.left():.0f} s left of --max-seconds"
                continue
            log(f"{fault}: starting ({budget.left():.0f} s left)")
            t0 = time.monotonic()
            try:
                FAULT_FUNCTIONS[fault](ctx, result)
            except Exception as exc:  # noqa: BLE001 - report it and go on with the next fault
                result.notes.append(f"the fault did not complete: {type(exc).__name__}: {exc}")
                log(f"{fault}: {type(exc).__name__}: {exc}")
            log(f"{fault}: {time.monotonic() - t0:.0f} s")
        for name in list(supervisor.procs):
            text = supervisor.log_text(name)
            if "Unrecoverable error" in text or (name in ("w1", "w2") and not supervisor.alive(name)):
                results[-1].notes.append(f"{name}: died or logged an unrecoverable error: {_tail(text, 300)}")
        if args.secure:
            security = check_security(stack, postgres)
    except KeyboardInterrupt as exc:
        failed_setup = f"interrupted: {exc}"
    except Exception as exc:  # noqa: BLE001 - the set-up failed: say so, tear down, exit non-zero
        failed_setup = f"{type(exc).__name__}: {exc}"
        log(f"set-up failed: {failed_setup}")
    finally:
        timer.cancel()
        cleanup()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    form = ", ".join([args.redis_via, *(["secure"] if args.secure else []), *(["quick"] if args.quick else [])])
    print(f"## hosts test ({form}), {when}\n")
    print(table(results))
    print()
    print(f"- **caches**: w1: {caches.get('w1') or 'not filled'}; w2: {caches.get('w2') or 'not filled'}")
    if args.secure:
        print(f"- **security**: {json.dumps(security)}")
    print(notes(results))
    print(f"\n{time.monotonic() - started:.0f} s in all; logs in {args.log_dir}")
    ok = not failed_setup and all(caches.get(h) for h in ("w1", "w2")) and len(results) == len(faults)
    ok = ok and (not args.secure or bool(security.get("ok")))
    for r in results:
        zero = (r.lost, r.duplicated, r.duplicate_messages, r.stuck, r.five_xx) == (0, 0, 0, 0, 0)
        ok = ok and not r.skipped and zero and r.runs > 0 and r.exact == r.runs and r.recover_s is not None
    if failed_setup:
        print(f"FAILED: {failed_setup}")
    if args.json is not None:
        figures = {
            "redis_via": args.redis_via,
            "quick": args.quick,
            "secure": args.secure,
            "security": security,
            "ok": ok,
            "failed": failed_setup,
            "caches": caches,
            "topology": {
                "prefix": topo.prefix,
                "subnet": topo.cidr,
                "hosts": {host: topo.addr(host) for host in HOSTS},
                "balancer": f"{topo.addr('web')}:{BALANCER_PORT}",
            },
            "results": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(figures, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
