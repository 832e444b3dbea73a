"""Run endpoints."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chatproject.exceptions import error_response
from runs import selectors, services
from runs.serializers import RunOutSerializer

NOT_FOUND = {404: error_response("No such run, or it belongs to another user.")}


class RunDetailApi(APIView):
    @extend_schema(responses={200: RunOutSerializer, **NOT_FOUND})
    def get(self, request: Request, run_id: int) -> Response:
        run = selectors.run_get(user=request.user, run_id=run_id)  # type: ignore[arg-type]
        return Response(RunOutSerializer(run).data)


class RunCancelApi(APIView):
    @extend_schema(
        request=None,
        responses={200: RunOutSerializer, **NOT_FOUND},
        description="A queued run ends `cancelled` at once; a streaming one goes to `cancelling` until the worker "
        "has aborted it. Idempotent: a finished run is returned as it is.",
    )
    def post(self, request: Request, run_id: int) -> Response:
        run = selectors.run_get(user=request.user, run_id=run_id)  # type: ignore[arg-type]
        run = services.run_cancel(run=run)
        return Response(RunOutSerializer(selectors.run_get(user=request.user, run_id=run.pk)).data)  # type: ignore[arg-type]
