"""Token authentication for programs."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate, user_logged_in
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import error_response
from core.http.fields import StrictCharField
from core.http.serializers import StrictSerializer


class TokenInSerializer(StrictSerializer):
    username = StrictCharField(max_length=150)
    password = StrictCharField(max_length=256, trim_whitespace=False)


class TokenApi(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="auth_token_create",
        request=TokenInSerializer,
        responses={
            200: inline_serializer("TokenOut", {"token": serializers.CharField()}),
            400: error_response("Missing fields, or the username or password is wrong."),
            429: error_response(
                "Too many failed sign-ins for this account or from this address; `Retry-After` says when to retry."
            ),
        },
        auth=[],
        description="Exchanges a username and password for an API token (send it as `Authorization: Token <token>`).",
    )
    def post(self, request: Request) -> Response:
        body = TokenInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # Through authenticate(request=...): the login throttle (accounts/login_throttle.py) sees every attempt and
        # turns this view's answer into 429 once the account or the address is locked out.
        user = authenticate(
            request._request, username=body.validated_data["username"], password=body.validated_data["password"]
        )
        if user is None:
            return Response(
                {"error": {"code": "invalid_credentials", "message": "Username or password is wrong."}},
                status=status.HTTP_400_BAD_REQUEST,
            )
        # A sign-in like any other (no session, though): the login throttle clears the account's failures, and
        # last_login is updated.
        user_logged_in.send(sender=user.__class__, request=request._request, user=user)
        token, _ = Token.objects.get_or_create(user=user)
        return Response({"token": token.key})
