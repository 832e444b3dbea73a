"""The small API the browser UI needs beyond chats and runs."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from web.selectors import account_summary


class LimitsOutSerializer(serializers.Serializer[Any]):
    tier = serializers.CharField(help_text="The tier's name.")
    priority = serializers.IntegerField(help_text="Scheduling priority: lower is served first.")
    bucket_capacity_tokens = serializers.IntegerField(help_text="Token-bucket size.")
    bucket_refill_per_s = serializers.FloatField(help_text="Tokens added to the bucket per second.")
    max_concurrent_runs = serializers.IntegerField(help_text="Runs that may be queued or streaming at once.")
    max_output_tokens = serializers.IntegerField(help_text="Cap on max_tokens for one run.")


class MeOutSerializer(serializers.Serializer[Any]):
    username = serializers.CharField(source="user.username")
    tier = serializers.CharField(source="limits.tier")
    limits = LimitsOutSerializer(help_text="The tier's limits with this user's overrides applied.")
    remaining_tokens = serializers.IntegerField(
        allow_null=True,
        help_text="Tokens left in the user's bucket now (a prompt reserves its tokens plus max_tokens); "
        "null when unknown.",
    )


class MeApi(APIView):
    @extend_schema(
        operation_id="me_retrieve",
        responses=MeOutSerializer,
        description="The signed-in user: tier, effective limits and the token budget left.",
    )
    def get(self, request: Request) -> Response:
        summary = account_summary(user=request.user)  # type: ignore[arg-type]
        return Response(MeOutSerializer(summary).data)
