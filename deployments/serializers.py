"""Response shapes of the deployment endpoints (``GET /api/models``). Shapes only: the view builds the data."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from deployments.models import DeploymentStatus


class ModelVersionOutSerializer(serializers.Serializer[Any]):
    id = serializers.CharField(help_text="'name@version': what a chat sends to pin this version.")
    version = serializers.CharField()
    status = serializers.ChoiceField(choices=DeploymentStatus.choices, help_text="Always 'ready' in this list.")
    traffic_weight = serializers.IntegerField(
        help_text="Share of the name's unpinned runs, relative to its other ready versions (0-100)."
    )
    ready_workers = serializers.IntegerField(
        help_text="Workers of this version that heartbeat ready (0: a run sent to it now is a 503)."
    )
    is_default = serializers.BooleanField(help_text="Chats that name no model use this deployment's name.")


class ModelOutSerializer(serializers.Serializer[Any]):
    id = serializers.CharField(help_text="The model name: each run goes to one of its versions, by weight.")
    versions = ModelVersionOutSerializer(many=True, help_text="Its ready versions, newest first.")


class ModelListOutSerializer(serializers.Serializer[Any]):
    default = serializers.CharField(
        allow_null=True, help_text="The default deployment's name: what a chat whose `model` is empty uses."
    )
    results = ModelOutSerializer(many=True, help_text="Names with at least one ready version, by name.")
    auto = serializers.BooleanField(
        help_text='Whether `model: "auto"` may be chosen: the router picks a deployment per prompt (docs/routing.md); '
        "true while a text-generation model is ready."
    )
