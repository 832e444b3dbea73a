"""Postgres over TLS: a throwaway cluster (``initdb``/``pg_ctl`` as the ``postgres`` user, ``ssl=on`` with a
certificate of a throwaway CA, ``pg_hba.conf`` refusing connections without TLS); a process whose
``DATABASE_URL`` says ``sslmode=verify-full&sslrootcert=<ca>`` connects over TLS through Django's settings (the
URL's query becomes the connection's OPTIONS, next to the pool), and one that trusts another CA is refused."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_servers import Certificates, claim_port, make_certificates

pytestmark = pytest.mark.live  # its own servers, tens of seconds: not in `make test-fast`

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import django; django.setup()\n"
    "from django.db import connection\n"
    "with connection.cursor() as cursor:\n"
    "    cursor.execute('SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()')\n"
    "    print(cursor.fetchone())\n"
)


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.skip("no Postgres server binaries (/usr/lib/postgresql/*/bin)")
    return Path(found[-1]).parent


@pytest.fixture
def tls_postgres() -> Iterator[tuple[int, Certificates]]:
    bindir = _pg_bin()
    try:
        postgres = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres user to run a cluster as")
    if os.geteuid() != 0:
        pytest.skip("starting a cluster as the postgres user needs root")
    folder = Path(tempfile.mkdtemp(prefix="pgtls-", dir="/tmp"))
    certs = make_certificates(folder / "certs")
    for path in (folder, folder / "certs", certs.cert, certs.key):
        os.chown(path, postgres.pw_uid, postgres.pw_gid)
    certs.key.chmod(0o600)
    data = folder / "data"

    def as_postgres(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv], capture_output=True, text=True, timeout=120, check=False
        )

    done = as_postgres(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust")
    assert done.returncode == 0, done.stderr
    (data / "pg_hba.conf").write_text(
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n"
    )
    port = claim_port(set())
    options = (
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c ssl=on "
        f"-c ssl_cert_file={certs.cert} -c ssl_key_file={certs.key}"
    )
    done = as_postgres(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start")
    assert done.returncode == 0, done.stderr + (folder / "log").read_text()
    try:
        yield port, certs
    finally:
        as_postgres(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def _django_connects(url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "chatproject.settings.test", "DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_django_connects_to_postgres_over_verified_tls(tls_postgres: tuple[int, Certificates]) -> None:
    port, certs = tls_postgres
    base = f"postgres://postgres@localhost:{port}/postgres"
    done = _django_connects(f"{base}?sslmode=verify-full&sslrootcert={certs.ca}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith("(True, 'TLSv1.")

    wrong_ca = _django_connects(f"{base}?sslmode=verify-full&sslrootcert={certs.other_ca}")
    assert wrong_ca.returncode != 0 and "certificate verify failed" in wrong_ca.stderr

    plain = _django_connects(f"{base}?sslmode=disable")
    assert plain.returncode != 0 and "no encryption" in plain.stderr
