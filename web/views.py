"""Pages of the browser UI. The page is a static shell; everything else comes from the JSON API."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView, LogoutView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

# Defence in depth for the pages: no inline script, no foreign origin. Model output is sanitized by DOMPurify and
# user text only becomes text nodes anyway (see static/web/markdown.js); this stops anything that slipped through.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


def _with_csp(response: HttpResponse) -> HttpResponse:
    response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response["Referrer-Policy"] = "same-origin"
    return response


@login_required
@ensure_csrf_cookie
def chat_page(request: HttpRequest, chat_id: int | None = None) -> HttpResponse:
    """The chat application: ``/`` (a new chat) or ``/c/<id>`` (an existing one). The script reads the chat id
    from the path and loads everything through the API, which checks access (404 for another user's chat)."""
    return _with_csp(render(request, "web/chat.html"))


@login_required
def usage_page(request: HttpRequest) -> HttpResponse:
    """The signed-in user's usage: tokens per day, the token bucket, the tier's limits, the last refusals. A static
    shell like the chat page: the script reads ``GET /api/usage``."""
    return _with_csp(render(request, "web/usage.html"))


class UiLoginView(LoginView):
    template_name = "web/login.html"
    redirect_authenticated_user = True
    next_page = "/"

    def render_to_response(self, context: dict, **kwargs: object) -> HttpResponse:  # type: ignore[override]
        return _with_csp(super().render_to_response(context, **kwargs))  # type: ignore[arg-type]


class UiLogoutView(LogoutView):
    next_page = "/login/"
