"""Django's middleware under ASGI: the hooks that do no I/O run on the event loop (``core.middleware``), and a hook
that may write (a modified session, stored messages) still runs on a thread, where it may reach the database."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
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
from django.test import AsyncClient, RequestFactory

from core.middleware import MessageMiddleware, SessionMiddleware
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

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


def _on_the_loop(call: Callable[[AsyncClient], Any]) -> tuple[Any, int]:
    """``call``'s answer through Django's ASGI handler, and the thread of the event loop that served it."""

    async def served() -> tuple[Any, int]:
        return await call(AsyncClient()), threading.get_ident()

    # In a context of its own: the request-id middleware's async path leaves its id set in the task's context.
    return contextvars.copy_context().run(async_to_sync(served))


def test_a_v1_call_runs_every_middleware_hook_on_the_event_loop(hook_threads: dict[str, int]) -> None:
    answer, loop = _on_the_loop(lambda client: client.get("/v1/models"))
    assert answer.status_code == 401  # no token: the view answered, every hook around it ran
    assert set(hook_threads) == {f"{cls.__name__}.{name}" for cls, name in HOOKS}
    assert {key for key, thread in hook_threads.items() if thread != loop} == set()
    assert answer["X-Frame-Options"] == "DENY" and answer["X-Content-Type-Options"] == "nosniff"


def test_a_login_saves_its_session_from_a_thread(hook_threads: dict[str, int]) -> None:
    user = UserFactory.create(username="alice")
    user.set_password("a long password")
    user.save()
    answer, loop = _on_the_loop(
        lambda client: client.post("/login/", {"username": "alice", "password": "a long password"})
    )
    assert answer.status_code == 302, answer.content
    key = answer.cookies["sessionid"].value
    assert Session.objects.filter(session_key=key).exists()  # saved: written by the session's response hook
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
