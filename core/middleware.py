"""Django's own middleware, with the hooks that do no I/O run on the event loop instead of a thread.

Under ASGI, Django's ``MiddlewareMixin`` runs every ``process_request`` and ``process_response`` through
``sync_to_async(thread_sensitive=True)``: a hop to the process's one thread-sensitive thread and back, twice per
middleware, for every request. With the seven middlewares of ``settings.MIDDLEWARE`` that came from Django, a
``/v1`` call or a run stream made about a dozen such hops before its view ran and after it returned, each queued
behind every other request's on that one thread, for hooks that set a header or a lazy attribute.

These classes are Django's, with ``__acall__`` calling a hook inline when it can do no I/O:

- the security headers, the common checks (``APPEND_SLASH``, ``DISALLOWED_USER_AGENTS``), the CSRF cookie checks
  (``CSRF_USE_SESSIONS`` off: the token is a cookie) and the frame options: always;
- the authentication: always (it sets ``request.user`` lazily; the views that read it do so on a database thread);
- the session and the messages: their request hooks always (both lazy); their response hooks only when nothing
  was written (a session not modified, no message stored or read), else on the thread as before, since saving a
  session or messages may reach the database.

``process_view`` (the CSRF check of a view) keeps Django's adaptation: the handler wraps it once, for any mode.

``settings.MIDDLEWARE`` keeps naming Django's classes, because ``manage.py check --deploy`` finds them by those dotted
paths (without ``django.middleware.security.SecurityMiddleware`` there it warns, and skips the HSTS and SSL checks).
The project's ASGI handler (``core.asgi_body.WholeBodyASGIHandler``) loads these subclasses in their place
(:func:`on_loop_classes`); under WSGI and Django's test clients the chain is Django's, unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as _Authentication
from django.contrib.messages.middleware import MessageMiddleware as _Messages
from django.contrib.sessions.middleware import SessionMiddleware as _Sessions
from django.core.handlers import base as django_handlers
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware as _XFrame
from django.middleware.common import CommonMiddleware as _Common
from django.middleware.csrf import CsrfViewMiddleware as _Csrf
from django.middleware.security import SecurityMiddleware as _Security
from django.utils.deprecation import MiddlewareMixin


class OnLoopMiddleware(MiddlewareMixin):
    """A ``MiddlewareMixin`` whose hooks run inline under ASGI, unless :meth:`response_needs_thread` says the
    response hook may do I/O."""

    def response_needs_thread(self, request: HttpRequest) -> bool:
        """Whether ``process_response`` may reach the database (or another blocking call) for ``request``."""
        return False

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        response = None
        process_request = getattr(self, "process_request", None)
        if process_request is not None:
            response = process_request(request)
        response = response or await cast(Awaitable[HttpResponseBase], self.get_response(request))
        process_response = getattr(self, "process_response", None)
        if process_response is None:
            return response
        if self.response_needs_thread(request):
            return await sync_to_async(process_response, thread_sensitive=True)(request, response)
        return process_response(request, response)


class SecurityMiddleware(OnLoopMiddleware, _Security):
    pass


class CommonMiddleware(OnLoopMiddleware, _Common):
    pass


class CsrfViewMiddleware(OnLoopMiddleware, _Csrf):
    def response_needs_thread(self, request: HttpRequest) -> bool:
        return bool(settings.CSRF_USE_SESSIONS)  # the token in the session: setting it may save the session

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        if settings.CSRF_USE_SESSIONS:  # reading the token loads the session
            return await MiddlewareMixin.__acall__(self, request)
        return await super().__acall__(request)


class AuthenticationMiddleware(OnLoopMiddleware, _Authentication):
    pass


class SessionMiddleware(OnLoopMiddleware, _Sessions):
    def response_needs_thread(self, request: HttpRequest) -> bool:
        session: Any = getattr(request, "session", None)
        return session is not None and (session.modified or bool(settings.SESSION_SAVE_EVERY_REQUEST))


class MessageMiddleware(OnLoopMiddleware, _Messages):
    def response_needs_thread(self, request: HttpRequest) -> bool:
        storage: Any = getattr(request, "_messages", None)
        return storage is not None and bool(storage.used or storage.added_new)


class XFrameOptionsMiddleware(OnLoopMiddleware, _XFrame):
    pass


ON_LOOP: dict[str, type[OnLoopMiddleware]] = {
    "django.middleware.security.SecurityMiddleware": SecurityMiddleware,
    "django.contrib.sessions.middleware.SessionMiddleware": SessionMiddleware,
    "django.middleware.common.CommonMiddleware": CommonMiddleware,
    "django.middleware.csrf.CsrfViewMiddleware": CsrfViewMiddleware,
    "django.contrib.auth.middleware.AuthenticationMiddleware": AuthenticationMiddleware,
    "django.contrib.messages.middleware.MessageMiddleware": MessageMiddleware,
    "django.middleware.clickjacking.XFrameOptionsMiddleware": XFrameOptionsMiddleware,
}
"""Django's middleware by the dotted path ``settings.MIDDLEWARE`` names it, and the subclass loaded in its place."""


@contextmanager
def on_loop_classes() -> Iterator[None]:
    """While a handler loads its middleware (``BaseHandler.load_middleware``, once per handler, at startup): each path
    of :data:`ON_LOOP` in ``settings.MIDDLEWARE`` is loaded as its subclass here, every other path as it is. Django's
    loader imports each path with ``django.core.handlers.base.import_string``, the name this replaces meanwhile."""
    django_import: Callable[[str], Any] = django_handlers.import_string  # type: ignore[attr-defined]

    def import_on_loop(path: str) -> Any:
        return ON_LOOP.get(path) or django_import(path)

    django_handlers.import_string = import_on_loop  # type: ignore[attr-defined]
    try:
        yield
    finally:
        django_handlers.import_string = django_import  # type: ignore[attr-defined]
