"""Django's middleware under the project's ASGI handler: the hooks that do no I/O run on the event loop
(``core.middleware``), a hook that may write (a modified session, stored messages) still runs on a thread, where it
may reach the database, and ``settings.MIDDLEWARE`` keeps Django's dotted paths, which ``check --deploy`` looks for."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib import messages
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessages
from django.contrib.messages.storage import default_storage
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessions
from django.contrib.sessions.models import Session
from django.http import HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware as DjangoXFrame
from django.middleware.common import CommonMiddleware as DjangoCommon
from django.middleware.csrf import CsrfViewMiddleware as DjangoCsrf
from django.middleware.security import SecurityMiddleware as DjangoSecurity
from django.test import RequestFactory
from django.utils.module_loading import import_string

from core.asgi_body import WholeBodyASGIHandler
from core.middleware import ON_LOOP, MessageMiddleware, SessionMiddleware
from tests.asgi_driver import AsgiAnswer, asgi_call
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)  # the handler runs sync work on threads of its own

HOOKS = [
    (DjangoSecurity, "process_request"),
    (DjangoSecurity, "process_response"),
    (DjangoSessions, "process_request"),
    (DjangoSessions, "process_response"),
    (DjangoCommon, "process_request"),
    (DjangoCommon, "process_response"),
    (DjangoCsrf, "process_request"),
    (DjangoCsrf, "process_response"),
    (DjangoMessages, "process_request"),
    (DjangoMessages, "process_response"),
    (DjangoXFrame, "process_response"),
]


@pytest.fixture
def hook_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """The thread each of Django's middleware hooks last ran on, by ``Class.hook``."""
    seen: dict[str, int] = {}

    def spying(original: Callable[..., Any], key: str) -> Callable[..., Any]:
        def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
            seen[key] = threading.get_ident()
            return original(self, *args, **kwargs)

        return spy

    for cls, name in HOOKS:
        monkeypatch.setattr(cls, name, spying(getattr(cls, name), f"{cls.__name__}.{name}"))
    yield seen


def _served(method: str, path: str, *, body: bytes = b"", headers: list[tuple[str, str]] | None = None) -> AsgiAnswer:
    """One request through the project's ASGI handler (``core.asgi_body.WholeBodyASGIHandler``, which
    ``chatproject/asgi.py`` serves), driven as uvicorn drives it."""
    return asgi_call(WholeBodyASGIHandler(), path, method=method, body=body, headers=headers)


def _cookie(cookies: list[str], name: str) -> str:
    return next(c.split(";", 1)[0].split("=", 1)[1] for c in cookies if c.startswith(f"{name}="))


def test_settings_name_djangos_middleware_by_the_paths_check_deploy_looks_for() -> None:
    """The ASGI handler loads the subclasses in their place: the tests below see their hooks on the event loop."""
    from django.conf import settings

    assert set(ON_LOOP) <= set(settings.MIDDLEWARE)
    assert all(issubclass(cls, import_string(path)) for path, cls in ON_LOOP.items())


def test_a_v1_call_runs_every_middleware_hook_on_the_event_loop(hook_threads: dict[str, int]) -> None:
    answer = _served("GET", "/v1/models")
    assert answer.status == 401  # no token: the view answered, every hook around it ran
    assert set(hook_threads) == {f"{cls.__name__}.{name}" for cls, name in HOOKS}
    assert {key for key, thread in hook_threads.items() if thread != answer.loop_thread} == set()
    assert answer.headers["x-frame-options"] == "DENY" and answer.headers["x-content-type-options"] == "nosniff"


def test_a_login_saves_its_session_from_a_thread(hook_threads: dict[str, int]) -> None:
    user = UserFactory.create(username="alice")
    user.set_password("a long password")
    user.save()
    form_page = _served("GET", "/login/")
    assert form_page.status == 200
    token = _cookie(form_page.cookies, "csrftoken")
    form = urlencode({"username": "alice", "password": "a long password", "csrfmiddlewaretoken": token}).encode()
    hook_threads.clear()
    answer = _served(
        "POST",
        "/login/",
        body=form,
        headers=[("content-type", "application/x-www-form-urlencoded"), ("cookie", f"csrftoken={token}")],
    )
    assert answer.status == 302
    session_key = _cookie(answer.cookies, "sessionid")
    assert Session.objects.filter(session_key=session_key).exists()  # saved by the session's response hook
    loop = answer.loop_thread
    assert hook_threads["SessionMiddleware.process_response"] != loop
    assert hook_threads["SessionMiddleware.process_request"] == loop
    assert hook_threads["SecurityMiddleware.process_response"] == loop


def test_the_session_and_messages_hooks_need_a_thread_only_once_something_was_written() -> None:
    request = RequestFactory().get("/")
    request.session = SessionStore()
    request._messages = default_storage(request)  # type: ignore[attr-defined]
    sessions, stored = SessionMiddleware(HttpResponse), MessageMiddleware(HttpResponse)
    assert not sessions.response_needs_thread(request) and not stored.response_needs_thread(request)
    messages.info(request, "saved")
    assert stored.response_needs_thread(request)
    request.session["key"] = "value"
    assert sessions.response_needs_thread(request)
