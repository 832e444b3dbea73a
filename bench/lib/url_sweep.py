"""Every URL pattern of the project as a request to send: the outage sweeps (``bench/fault_suite.py``'s
``outage_sweep``, ``tests/project/test_outages.py``) hit each one while Redis or Postgres is out and count the
5xx that are not a 503.

``python -m bench.lib.url_sweep`` (with the stack's environment) prints them as JSON: ``[[method, template],
...]``, a template's arguments as ``{name}`` (:func:`fill` puts real ids in: a chat and a run of the caller's
user, so the views get past their 404 to the services behind them). The admin contributes its index and login
page only (its hundreds of model pages are the same views).
"""

from __future__ import annotations

import json
import re
import sys

from django.urls import URLPattern, URLResolver, get_resolver

_ARG = re.compile(r"<(?:\w+:)?(\w+)>")
_SKIPPED_PREFIXES = ("admin/", "static/")
_ADMIN_PATHS = ("/admin/", "/admin/login/")


def _template(route: str) -> str:
    return _ARG.sub(lambda m: "{" + m.group(1) + "}", route)


def fill(template: str, **ids: object) -> str:
    """The template's path with ``ids`` (``chat_id``, ``run_id``...) in it; 1 for an argument not given."""
    return re.sub(r"\{(\w+)\}", lambda m: str(ids.get(m.group(1), 1)), template)


def body_for(template: str, *, model: str) -> dict[str, object]:
    """A valid body for a POST to ``template``: a prompt where the view takes one, so the request reaches the
    admission, the scheduler and the stream (Redis) instead of stopping at validation."""
    if template.endswith("/messages"):
        return {"content": "Hello", "max_tokens": 4}
    if template == "/v1/chat/completions":
        return {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
    if template == "/v1/completions":
        return {"model": model, "prompt": "Hello", "max_tokens": 4}
    return {}


def _routes(patterns: list[URLPattern | URLResolver], prefix: str = "") -> list[str]:
    found: list[str] = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += _routes(pattern.url_patterns, route)
        elif not route.startswith(_SKIPPED_PREFIXES) and "(?P" not in route and "^" not in route:
            found.append("/" + _template(route))
    return found


def sweep_requests() -> list[tuple[str, str]]:
    """(method, template) for every pattern: a GET and a POST each (a view that takes neither answers 405)."""
    paths = sorted(set(_routes(get_resolver().url_patterns)) | set(_ADMIN_PATHS))
    return [(method, path) for path in paths for method in ("GET", "POST")]


if __name__ == "__main__":
    import django

    django.setup()
    json.dump(sweep_requests(), sys.stdout)
