"""A web process that is shutting down ends its run streams with a ``reconnect`` event.

Without it, uvicorn's graceful shutdown waits for every open SSE response, and those only end with their run:
a deploy or a restart hung in "Waiting for connections to close" while one client was connected. On SIGTERM
(or SIGINT) each stream this process follows gets ``event: reconnect`` with the client's resume point and is
closed; the browser's EventSource reconnects by itself, with ``Last-Event-ID``, to another replica or to the
restarted process, and misses nothing. The OpenAI-compatible streams, which cannot be resumed, keep going
until uvicorn's ``--timeout-graceful-shutdown`` cuts them.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

_draining = threading.Event()


def draining() -> bool:
    """True once this process has been told to stop."""
    return _draining.is_set()


def begin_drain() -> None:
    _draining.set()


def install_drain_on_signals() -> None:
    """Chains :func:`begin_drain` before the server's own SIGTERM/SIGINT handlers (call after it installed
    them: uvicorn does before the ASGI lifespan startup), so the server still shuts down as it would."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous: Any = signal.getsignal(sig)

        def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
            begin_drain()
            if callable(previous):
                previous(signum, frame)
            else:  # no server handler (SIG_DFL or SIG_IGN): act as it would have without us
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
                signal.raise_signal(signum)

        signal.signal(sig, handler)


async def drain_on_signals() -> None:
    """The ASGI lifespan startup step of :func:`install_drain_on_signals`."""
    install_drain_on_signals()
