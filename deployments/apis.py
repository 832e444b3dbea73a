"""Deployment endpoints: ``GET /api/models``, what a chat's ``model`` may name. Thin: read the snapshot, serialize.

The listing comes from the per-process snapshot that picks a request's deployment (``deployments.selection``): no
query per request beyond its refresh, so it is at most ``DEPLOYMENT_CACHE_S`` (rows) and
``DEPLOYMENT_WORKERS_CACHE_S`` (ready workers) old, as is what a prompt is resolved against.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from deployments import selection
from deployments.models import DeploymentKind
from deployments.serializers import ModelListOutSerializer


def model_listing() -> dict[str, Any]:
    """Each name with a ready text-generation version (what a chat may name: an embedding model cannot chat), with
    its ready versions (newest first), and the default's name."""
    ready = sorted(
        (d for d in selection.served_deployments() if d.is_ready and d.kind == DeploymentKind.GENERATE),
        key=lambda d: d.name,
    )  # stable
    default = selection.default_deployment()
    return {
        "default": default.name if default is not None else None,
        "auto": bool(ready),
        "results": [
            {
                "id": name,
                "versions": [
                    {
                        "id": d.key,
                        "version": d.version,
                        "status": d.status,
                        "traffic_weight": d.traffic_weight,
                        "ready_workers": selection.ready_workers(d.key),
                        "is_default": d.is_default,
                    }
                    for d in versions
                ],
            }
            for name, versions in groupby(ready, key=lambda d: d.name)
        ],
    }


class ModelListApi(APIView):
    @extend_schema(
        operation_id="models_list",
        responses={200: ModelListOutSerializer},
        description="What a chat's `model` may name: each model name that has a ready version (a run sent to "
        "the name goes to one of them, by `traffic_weight`) and each of those versions as `name@version` (pinned). "
        "A version with no `ready_workers` answers a prompt with a 503 until one is up. `default` is the name "
        "that a chat with an empty `model` uses. At most a few seconds old (a per-process snapshot).",
    )
    def get(self, request: Request) -> Response:
        return Response(ModelListOutSerializer(model_listing()).data)
