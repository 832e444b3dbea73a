"""Sampling profiles of running processes with py-spy, and their top functions.

``py-spy record --gil --format speedscope --nonblocking``: only the thread holding the GIL is sampled, so the
samples are where the process runs Python (py-spy's idle detection alone counts 32 task threads blocked in
``SimpleQueue.get(timeout=...)`` as busy); ``--nonblocking`` does not pause the target per sample. Time in C
code that released the GIL (socket waits, the kernel) is not in the profile: ``/proc`` has the whole CPU figure.
Python 3.11 line numbers from py-spy can be off (generator frames); read the function names. Besides the
speedscope file, a folded-stacks file is written next to it (``flamegraph.pl`` / ``inferno-flamegraph`` turn
it into an SVG).
The top functions are counted from the samples: *own* = the sample's innermost frame, *total* = any frame.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY_SPY = str(ROOT / ".venv" / "bin" / "py-spy")


@dataclass(frozen=True)
class Profile:
    label: str
    path: Path
    busy_s: float
    """Seconds of busy threads sampled (py-spy's speedscope weights are seconds)."""
    own: list[tuple[str, float]]
    """(function, share of the samples) by own time, highest first."""
    total: list[tuple[str, float]]


def start(pid: int, out: Path, *, duration_s: int, rate: int = 100) -> subprocess.Popen[bytes]:
    """Starts recording ``pid`` (its own threads: subprocesses are not followed) for ``duration_s`` seconds."""
    argv = [
        *(PY_SPY, "record", "--pid", str(pid), "--duration", str(duration_s), "--rate", str(rate)),
        *("--gil", "--nonblocking", "--format", "speedscope", "--output", str(out)),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _frame_name(frame: dict[str, object]) -> str:
    file = str(frame.get("file", ""))
    for marker in ("site-packages/", "python3.11/"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    else:
        file = file.replace(str(ROOT) + "/", "")
    return f"{frame.get('name')} ({file}:{frame.get('line')})"


def analyse(label: str, path: Path, top: int = 10) -> Profile:
    """Reads a speedscope file py-spy wrote, writes ``<path>.folded`` and returns the top functions."""
    data = json.loads(path.read_text())
    names = [_frame_name(f) for f in data["shared"]["frames"]]
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    folded: Counter[str] = Counter()
    busy_s = 0.0
    for profile in data["profiles"]:
        for stack, weight in zip(profile["samples"], profile["weights"], strict=True):
            if not stack:
                continue
            busy_s += weight
            frames = [names[i] for i in stack]  # outermost first
            own[frames[-1]] += weight
            for name in set(frames):
                total[name] += weight
            folded[";".join([profile["name"], *frames])] += weight
    path.with_suffix(".folded").write_text("".join(f"{k} {v}\n" for k, v in folded.items()))

    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, n / busy_s) for name, n in counter.most_common(top)] if busy_s else []

    return Profile(label, path, busy_s, shares(own), shares(total))


def print_profile(profile: Profile, *, duration_s: int) -> None:
    busy = profile.busy_s / duration_s if duration_s else 0.0
    print(f"\nprofile: {profile.label}: {profile.busy_s:.1f} s holding the GIL sampled in {duration_s} s")
    print(f"  (the GIL held {busy * 100:.0f}% of the time; {profile.path.relative_to(ROOT)})")
    print("  top by own time (share of the busy samples):")
    for name, share in profile.own:
        print(f"    {share * 100:5.1f}%  {name}")
    print("  top by total time (the function or anything it called):")
    for name, share in profile.total:
        print(f"    {share * 100:5.1f}%  {name}")
