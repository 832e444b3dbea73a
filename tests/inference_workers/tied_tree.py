"""A stand-in for a worker and its engine processes, for the lifeline tests: this process starts a child through
``multiprocessing`` (spawn, as vLLM starts its engine core on CPU hosts), which starts a daemonic grandchild (as
the engine core starts vLLM's ``Worker``); it prints the three pids as JSON and sleeps until it is killed.

Usage: ``python tests/inference_workers/tied_tree.py tied|untied``
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from inference_workers.engine.lifeline import tied_children


def leaf() -> None:
    time.sleep(600)


def middle(pipe: Connection) -> None:
    grandchild = multiprocessing.get_context("spawn").Process(target=leaf, daemon=True)
    grandchild.start()
    pipe.send(grandchild.pid)
    time.sleep(600)


@contextlib.contextmanager
def untied() -> Iterator[None]:
    yield


def main() -> None:
    context = multiprocessing.get_context("spawn")
    reader, writer = context.Pipe(duplex=False)
    with tied_children() if sys.argv[1] == "tied" else untied():
        child = context.Process(target=middle, args=(writer,))
        child.start()
    print(json.dumps({"main": os.getpid(), "child": child.pid, "grandchild": reader.recv()}), flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
