"""The fault benches' own servers and processes: a time budget, a supervisor of process groups with logs, a
Postgres cluster (``initdb``) and a ``redis-server`` of a bench's own. ``bench/fault_suite.py`` (on loopback) and
``bench/hosts_test.py`` (in network namespaces: ``prefix`` runs a command inside one) both start theirs here."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from bench.lib.certificates import Certificates
from bench.lib.processes import free_port, stop_process_group

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Budget:
    """The suite's time bound: every wait asks what is left."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def until(self, seconds: float) -> float:
        """A deadline ``seconds`` from now, but never past the suite's end (monotonic time)."""
        return min(time.monotonic() + seconds, self.end)


class OutOfTime(RuntimeError):
    pass


class Supervisor:
    """Every process the suite starts, each in a process group of its own, with its log in ``log_dir``."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{name}.log").open("ab") as out:  # a restart appends to the same log
            proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        with self._lock:
            self.procs[name] = proc
        return proc

    def log_text(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def kill_main(self, name: str) -> int:
        """SIGKILL to the process alone, not its group (what an outside ``kill -9 PID`` does); returns its pid."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        return proc.pid

    def stop(self, name: str, *, grace_s: float = 10) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            stop_process_group(proc, grace_s=grace_s)

    def stop_all(self, names: list[str] | None = None) -> None:
        for name in list(self.procs) if names is None else names:
            self.stop(name)


def run_quiet(argv: list[str], *, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout


class PrivatePostgres:
    """A Postgres cluster of the suite's own (``initdb`` in ``root``), on a free port and a socket in ``root``.

    ``host`` is the address it listens on, ``clients`` the network (CIDR) allowed in besides loopback (password
    login), ``prefix`` what its server commands run under (``ip netns exec NS``: the server lives in that network
    namespace; the suite still reaches it through the socket in ``root``). With ``tls`` the clients from that
    network must use TLS (``hostssl``; ``hostnossl`` is rejected) and :attr:`url` asks for it, the server's name
    checked against the CA (``sslmode=verify-full``)."""

    def __init__(
        self,
        root: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        clients: str = "",
        prefix: tuple[str, ...] = (),
        database: str = "faults",
        tls: Certificates | None = None,
    ) -> None:
        self.dir = root / "pg"
        self.data = self.dir / "data"
        self.host = host
        self.port = port or free_port()
        self.clients = clients
        self.prefix = prefix
        self.database = database
        self.tls = tls
        self.as_root = os.geteuid() == 0
        self.started = False

    def _cmd(self, *argv: str) -> list[str]:
        # As root, initdb and pg_ctl refuse to run: they run as the postgres user, on a directory it owns.
        return [*self.prefix, *(["runuser", "-u", "postgres", "--"] if self.as_root else []), *argv]

    @property
    def url(self) -> str:
        url = f"postgres://chat:chat@{self.host}:{self.port}/{self.database}"
        return url if self.tls is None else f"{url}?sslmode=verify-full&sslrootcert={self.tls.ca}"

    def init(self) -> None:
        self.dir.mkdir(parents=True)
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        run_quiet(
            self._cmd(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        )
        if self.clients:
            with (self.data / "pg_hba.conf").open("a") as hba:
                if self.tls is None:
                    hba.write(f"host all all {self.clients} scram-sha-256\n")
                else:
                    hba.write(
                        f"hostssl all all {self.clients} scram-sha-256\nhostnossl all all {self.clients} reject\n"
                    )
        if self.tls is not None:
            # The server's key must be the server user's own, readable by it alone.
            for source, name in ((self.tls.cert, "server.crt"), (self.tls.key, "server.key")):
                target = self.data / name
                shutil.copyfile(source, target)
                target.chmod(0o600)
                if self.as_root:
                    shutil.chown(target, "postgres", "postgres")
        self.start()
        sql = f"CREATE ROLE chat LOGIN PASSWORD 'chat'; CREATE DATABASE {self.database} OWNER chat;"
        for statement in sql.split("; "):
            run_quiet(
                self._cmd(
                    str(PG_BIN / "psql"), "-h", str(self.dir), "-p", str(self.port), "-U", "postgres", "-qc", statement
                )
            )

    def query(self, sql: str) -> str:
        """One statement's rows as ``psql -At`` prints them, as the superuser through the socket."""
        argv = [str(PG_BIN / "psql"), "-h", str(self.dir), "-p", str(self.port), "-U", "postgres", "-d", "postgres"]
        return run_quiet(self._cmd(*argv, "-Atc", sql)).strip()

    def _pg_ctl(self, *args: str) -> None:
        run_quiet(self._cmd(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args))

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses={self.host} -c max_connections=200"
        if self.tls is not None:
            options += " -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key"
        self._pg_ctl("-l", str(self.dir / "postgres.log"), "-o", options, "start")
        self.started = True

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every session is cut, then the same server starts again."""
        self._pg_ctl("-m", "fast", "-l", str(self.dir / "postgres.log"), "restart")

    def stop(self) -> None:
        if self.started:
            try:
                self._pg_ctl("-m", "fast", "stop")
            except Exception:  # noqa: BLE001 - try harder: the directory is about to be deleted
                with contextlib.suppress(Exception):
                    self._pg_ctl("-m", "immediate", "stop")
            self.started = False


class PrivateRedis:
    """A ``redis-server`` of the suite's own with an append-only file in ``root``."""

    def __init__(self, root: Path, supervisor: Supervisor) -> None:
        self.dir = root / "redis"
        self.port = free_port()
        self.supervisor = supervisor

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, decode_responses=True)

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        argv += ["--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--maxclients", "2000"]
        proc = self.supervisor.spawn("redis", argv, dict(os.environ))
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start; see {self.supervisor.log_dir / 'redis.log'}")
            time.sleep(0.05)

    def shutdown(self) -> None:
        """SIGTERM, which Redis handles as ``SHUTDOWN``: it syncs its append-only file, then exits. (Not the
        command through redis-py, whose retries on the closed connection add seconds.)"""
        proc = self.supervisor.procs["redis"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)

    def stop(self) -> None:
        self.supervisor.stop("redis")
