"""The live stack with the real engine (vLLM, SmolLM2 on the CPU) for the OpenAI-parity tests.

One stack (web, dispatcher, a worker building vLLM: about a minute) serves the whole package. Its name is
``live_stack`` so the shared ``settle_runs`` fixture cancels what a test leaves running.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.live_stack import (
    REAL_ENGINE_ENV,
    LiveStack,
    run_live_stack,
    settle_runs_fixture,  # noqa: F401 - the shared fixture, for this package
)


@pytest.fixture(scope="package", name="live_stack")
def engine_stack_fixture(django_db_setup: None, django_db_blocker: object) -> Iterator[LiveStack]:
    yield from run_live_stack(django_db_blocker, engine_env=REAL_ENGINE_ENV, worker_ready_s=300)
