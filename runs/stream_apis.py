"""SSE stream of a run's events (built out by the SSE issue)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse


def run_stream(request: HttpRequest, run_id: int) -> HttpResponse:
    return JsonResponse(
        {"error": {"code": "not_implemented", "message": "Streaming is not available yet; poll GET /api/runs/{id}."}},
        status=501,
    )
