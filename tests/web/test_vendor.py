"""The vendored browser libraries (``web/static/web/vendor/``) are exactly the files ``scripts/vendor_js.py`` took
from the npm tarballs that ``vendor/manifest.json`` names: every file's sha256 matches, nothing is unlisted."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "web" / "static" / "web" / "vendor"


def manifest() -> list[dict[str, object]]:
    return json.loads((VENDOR / "manifest.json").read_text())["packages"]


def test_every_vendored_file_matches_its_checksum_in_the_manifest() -> None:
    checked = 0
    for package in manifest():
        assert re.fullmatch(r"\d+\.\d+\.\d+", str(package["version"])), f"{package['name']}: pin an exact version"
        assert str(package["integrity"]).startswith("sha512-"), f"{package['name']}: no npm tarball integrity"
        for name, info in package["files"].items():  # type: ignore[attr-defined]
            digest = hashlib.sha256((VENDOR / name).read_bytes()).hexdigest()
            assert digest == info["sha256"], f"{name} differs from {package['name']}@{package['version']}"
            checked += 1
    assert checked >= 4


def test_no_file_in_vendor_is_missing_from_the_manifest() -> None:
    listed = {name for package in manifest() for name in package["files"]}  # type: ignore[attr-defined]
    present = {path.name for path in VENDOR.iterdir()} - {"manifest.json"}
    assert present == listed


def test_the_manifest_pins_what_the_vendor_script_fetches() -> None:
    script = (ROOT / "scripts" / "vendor_js.py").read_text()
    for package in manifest():
        assert f'"{package["name"]}",\n        "{package["version"]}",' in script, package["name"]
