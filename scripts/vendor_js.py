#!/usr/bin/env python3
"""Fetches the browser UI's third-party JavaScript from the npm registry into ``web/static/web/vendor/``.

The UI has no build step and no Node at run time: each library's ready-made browser file is copied byte for byte
from the package's npm tarball (``npm pack NAME@VERSION``), at the version pinned in ``PACKAGES`` below, and
``vendor/manifest.json`` records the tarball's integrity and every file's sha256. ``tests/web/test_vendor.py``
checks the files against that manifest.

To update a library: change its version here, run ``python scripts/vendor_js.py``, run the browser tests, commit the
files and the manifest. ``--check`` only verifies the files against the manifest (no network).
A tarball whose integrity differs from the one the manifest records for the same version is refused.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "web" / "static" / "web" / "vendor"
MANIFEST = VENDOR / "manifest.json"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    files: dict[str, str]
    """Path inside the tarball (under ``package/``) -> file name in ``vendor/``."""
    purpose: str


PACKAGES = [
    Package(
        "markdown-it",
        "15.0.3",
        {"dist/browser/markdown-it.esm.min.mjs": "markdown-it.esm.min.mjs", "LICENSE": "markdown-it.LICENSE.txt"},
        "Markdown parser (CommonMark + tables, strikethrough)",
    ),
    Package(
        "dompurify",
        "3.4.18",
        {"dist/purify.es.mjs": "purify.es.mjs", "LICENSE": "dompurify.LICENSE.txt"},
        "HTML sanitizer for the rendered Markdown",
    ),
    Package(
        "@highlightjs/cdn-assets",
        "11.12.0",
        {"es/highlight.min.js": "highlight.min.js", "LICENSE": "highlight.js.LICENSE.txt"},
        "highlight.js with its common languages, for code blocks",
    ),
    Package(
        "axe-core",
        "4.14.1",
        {"axe.min.js": "axe.min.js", "LICENSE": "axe-core.LICENSE.txt"},
        "accessibility checks, loaded only by the browser tests (tests/ui/test_accessibility.py)",
    ),
]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tarball_integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def npm_pack(package: Package, into: Path) -> Path:
    out = subprocess.run(  # noqa: S603 - our own pinned package names
        ["npm", "pack", f"{package.name}@{package.version}", "--json", "--silent"],  # noqa: S607
        cwd=into,
        check=True,
        capture_output=True,
        text=True,
    )
    return into / json.loads(out.stdout)[0]["filename"]


def load_manifest() -> dict[str, dict[str, object]]:
    if not MANIFEST.exists():
        return {}
    return {entry["name"]: entry for entry in json.loads(MANIFEST.read_text())["packages"]}


def fetch() -> None:
    previous = load_manifest()
    VENDOR.mkdir(parents=True, exist_ok=True)
    entries = []
    with tempfile.TemporaryDirectory() as tmp:
        for package in PACKAGES:
            tarball = npm_pack(package, Path(tmp))
            integrity = tarball_integrity(tarball)
            old = previous.get(package.name)
            if old and old["version"] == package.version and old["integrity"] != integrity:
                sys.exit(f"{package.name}@{package.version}: the tarball's integrity changed since it was vendored")
            files = {}
            with tarfile.open(tarball) as tar:
                for inner, name in package.files.items():
                    member = tar.extractfile(f"package/{inner}")
                    if member is None:
                        sys.exit(f"{package.name}: {inner} is not a file in the tarball")
                    (VENDOR / name).write_bytes(member.read())
                    files[name] = {"from": inner, "sha256": sha256(VENDOR / name)}
            entries.append(
                {
                    "name": package.name,
                    "version": package.version,
                    "integrity": integrity,
                    "purpose": package.purpose,
                    "files": files,
                }
            )
            print(f"{package.name}@{package.version}: {', '.join(files)}")
    MANIFEST.write_text(json.dumps({"packages": entries}, indent=2) + "\n")


def check() -> list[str]:
    """Every vendored file's problems against the manifest (empty: all good)."""
    problems = []
    manifest = load_manifest()
    listed = set()
    for package in PACKAGES:
        entry = manifest.get(package.name)
        if entry is None or entry["version"] != package.version:
            problems.append(f"{package.name}@{package.version} is not in the manifest: run scripts/vendor_js.py")
            continue
        for name, info in entry["files"].items():  # type: ignore[attr-defined]
            listed.add(name)
            path = VENDOR / name
            if not path.exists():
                problems.append(f"{name} is missing")
            elif sha256(path) != info["sha256"]:
                problems.append(f"{name} does not match its sha256 in the manifest")
    extra = {p.name for p in VENDOR.iterdir()} - listed - {MANIFEST.name}
    problems.extend(f"{name} is in vendor/ but not in the manifest" for name in sorted(extra))
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the files against the manifest only")
    if parser.parse_args().check:
        problems = check()
        print("\n".join(problems) or "vendor: every file matches the manifest")
        sys.exit(1 if problems else 0)
    fetch()


if __name__ == "__main__":
    main()
