"""Throwaway TLS certificates (``openssl``): a CA, a server certificate it signed for the names and addresses
given, and a second CA that signed nothing. The TLS tests (on loopback) and ``bench/hosts_test.py --secure`` (one
certificate for every server of the topology, named by its hosts' addresses) make theirs here."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path
    other_ca: Path
    """A CA that signed nothing here: a client that trusts only it must refuse the server."""


def make_certificates(
    folder: Path, *, names: Iterable[str] = ("localhost",), addresses: Iterable[str] = ("127.0.0.1",)
) -> Certificates:
    """A CA and a server certificate for ``names`` (DNS) and ``addresses`` (IP), valid two days."""
    folder.mkdir(parents=True, exist_ok=True)
    names, addresses = list(names), list(addresses)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    for name in ("ca", "other-ca"):
        openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=test {name}",
            "-keyout", f"{name}.key", "-out", f"{name}.pem",
        )  # fmt: skip
    subject = f"/CN={(names or addresses)[0]}"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", "server.key", "-out", "s.csr")
    sans = [f"DNS:{name}" for name in names] + [f"IP:{address}" for address in addresses]
    (folder / "san.ext").write_text(f"subjectAltName={','.join(sans)}\n")
    openssl(
        "x509", "-req", "-in", "s.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "san.ext", "-out", "server.pem",
    )  # fmt: skip
    return Certificates(
        ca=folder / "ca.pem", cert=folder / "server.pem", key=folder / "server.key", other_ca=folder / "other-ca.pem"
    )
