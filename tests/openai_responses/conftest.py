"""The live stack (``tests.live_stack``) for ``/v1/responses``, driven by the official ``openai`` client."""

from __future__ import annotations

from tests.live_stack import (  # noqa: F401 - the live stack's fixtures, for this package
    has_worker_fixture,
    live_stack_fixture,
    needs_worker_fixture,
    settle_runs_fixture,
)
