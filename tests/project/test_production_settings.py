"""``chatproject.settings.production`` passes Django's deployment checklist and refuses a weak secret key."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, secret_key: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env["DJANGO_SETTINGS_MODULE"] = "chatproject.settings.production"
    if secret_key is not None:
        env["DJANGO_SECRET_KEY"] = secret_key
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_check_deploy_passes_with_the_production_settings() -> None:
    done = _manage("check", "--deploy", "--fail-level", "WARNING", secret_key=secrets.token_urlsafe(64))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


@pytest.mark.parametrize(
    "secret_key",
    [None, "dev-insecure-change-me", "x" * 60, secrets.token_urlsafe(20)],
    ids=["missing", "the-dev-default", "too-few-distinct-characters", "too-short"],
)
def test_the_production_settings_refuse_a_weak_secret_key(secret_key: str | None) -> None:
    done = _manage("check", secret_key=secret_key)
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY" in done.stderr
