"""End-to-end browser fixtures: the real stack (``tests.live_stack``: uvicorn, a Celery worker with the
simulated engine, the dispatcher) driven by headless Chromium (Debian's ``chromium``) through Playwright.

The tests are transactional so those processes see every row the test writes. Screenshots land in
``artifacts/screenshots/``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from accounts.models import User
from tests.live_stack import (  # noqa: F401 - the live stack's fixtures, for this package
    LiveStack,
    has_worker_fixture,
    live_stack_fixture,
    needs_worker_fixture,
    settle_runs_fixture,
)
from tests.ui.helpers import sign_in

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="package")
def browser() -> Iterator[object]:
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: run `bash scripts/browser.sh` (Debian package `chromium`).")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop on this thread, which trips Django's async-safety check
    # for the ORM calls the tests make between browser steps. Nothing here is concurrent: allow it.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def context(browser: object, live_stack: LiveStack) -> Iterator[object]:
    ctx = browser.new_context(  # type: ignore[attr-defined]
        base_url=live_stack.base_url, viewport={"width": 1280, "height": 800}, reduced_motion="reduce"
    )
    ctx.set_default_timeout(15_000)
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: object, request: pytest.FixtureRequest) -> Iterator[object]:
    """A page that records every JS dialog, console error and uncaught exception (the XSS tests need them).
    Dialogs are dismissed (``confirm()`` says no) unless the test sets ``page.accept_dialogs = True``."""
    pg = context.new_page()  # type: ignore[attr-defined]
    pg.dialogs = []
    pg.js_errors = []
    pg.accept_dialogs = False

    def on_dialog(dialog: object) -> None:
        pg.dialogs.append(dialog.message)  # type: ignore[attr-defined]
        if pg.accept_dialogs:
            dialog.accept()  # type: ignore[attr-defined]
        else:
            dialog.dismiss()  # type: ignore[attr-defined]

    pg.on("dialog", on_dialog)
    pg.on("pageerror", lambda exc: pg.js_errors.append(str(exc)))
    yield pg
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        shoot(pg, f"{request.node.name}-FAILED")
    assert pg.js_errors == [], f"uncaught errors in the page: {pg.js_errors}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]


def shoot(page: object, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)  # type: ignore[attr-defined]
    return path


@pytest.fixture
def screenshot(request: pytest.FixtureRequest) -> Callable[[object, str], Path]:
    def take(page: object, step: str) -> Path:
        return shoot(page, f"{request.node.name}-{step}")

    return take


@pytest.fixture
def login(context: object, live_stack: LiveStack) -> Callable[[User], None]:
    """Signs the browser context in as ``user`` through a real session (skips typing the form)."""
    return lambda user: sign_in(context, user, live_stack.base_url)


@pytest.fixture
def api_for() -> Callable[[User], APIClient]:
    """An API client signed in as the given user, for setting the scene through the real endpoints."""

    def make(user: User) -> APIClient:
        client = APIClient()
        client.force_authenticate(user)
        return client

    return make
