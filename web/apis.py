"""The small API the browser UI needs beyond chats and runs."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import Tier
from web.selectors import account_summary


class TierOutSerializer(serializers.ModelSerializer[Tier]):
    class Meta:
        model = Tier
        fields = [
            "name",
            "priority",
            "max_concurrent_runs",
            "max_output_tokens",
            "bucket_capacity_tokens",
            "bucket_refill_per_s",
            "context_limit_tokens",
        ]


class MeOutSerializer(serializers.Serializer[Any]):
    username = serializers.CharField(source="user.username")
    tier = TierOutSerializer()
    remaining_tokens = serializers.IntegerField(allow_null=True)


class MeApi(APIView):
    @extend_schema(
        responses=MeOutSerializer,
        description="The signed-in user: tier, its limits and the token budget left (null when unknown).",
    )
    def get(self, request: Request) -> Response:
        summary = account_summary(user=request.user)  # type: ignore[arg-type]
        return Response(MeOutSerializer(summary).data)
