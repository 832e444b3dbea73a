"""Every copy of the runs' active statuses equals ``runs.models.ACTIVE_STATUSES``, the one they copy.

The layers force a copy where a lower package counts runs (``deployments.admin``: ``deployments`` cannot import
``runs``), the browser needs its own (``web/static/web/constants.js``), and the migrations froze the
``one_active_run_per_chat`` constraint's list. Grep for ``"queued", "streaming", "cancelling"`` before adding another.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.db.migrations.loader import MigrationLoader

from deployments.admin import ACTIVE_RUN_STATUSES
from runs.models import ACTIVE_STATUSES

ROOT = Path(__file__).resolve().parents[2]
ACTIVE = sorted(str(status) for status in ACTIVE_STATUSES)


def test_the_deployments_admin_counts_the_runs_active_statuses() -> None:
    assert sorted(ACTIVE_RUN_STATUSES) == ACTIVE


def test_the_browser_constants_name_the_runs_active_statuses() -> None:
    source = (ROOT / "web" / "static" / "web" / "constants.js").read_text()
    run_status = re.search(r"export const RunStatus = Object\.freeze\(\{(.*?)\}\);", source, re.DOTALL)
    active = re.search(r"const ACTIVE_STATUSES = new Set\(\[(.*?)\]\);", source, re.DOTALL)
    assert run_status is not None and active is not None, "constants.js no longer defines RunStatus/ACTIVE_STATUSES"
    values = dict(re.findall(r'(\w+): "([^"]*)"', run_status.group(1)))
    names = re.findall(r"RunStatus\.(\w+)", active.group(1))
    assert sorted(values[name] for name in names) == ACTIVE


def test_the_migrated_one_active_run_per_chat_constraint_covers_the_active_statuses() -> None:
    state = MigrationLoader(None, ignore_no_migrations=True).project_state()
    constraints = state.models["runs", "run"].options["constraints"]
    constraint = next(c for c in constraints if c.name == "one_active_run_per_chat")
    assert sorted(dict(constraint.condition.children)["status__in"]) == ACTIVE
