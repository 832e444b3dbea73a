"""``/api/runs/{id}/feedback``: rate the answer of one of your runs. Thin: validate, call one service."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import request_user
from core.errors import error_response
from feedback import services
from feedback.models import Rating
from feedback.serializers import FeedbackInSerializer, FeedbackOutSerializer
from runs import selectors as run_selectors

NOT_FOUND = {404: error_response("No such run, or it belongs to another user.")}


class RunFeedbackApi(APIView):
    @extend_schema(
        operation_id="runs_feedback_update",
        request=FeedbackInSerializer,
        responses={
            200: FeedbackOutSerializer,
            400: error_response("Invalid body: says which field is wrong and why."),
            409: error_response("The run has not finished, or wrote no answer (`not_rateable`)."),
            **NOT_FOUND,
        },
        description="Rates the run's answer `up` or `down`, with an optional `reason` (up to 1000 characters); "
        "one rating per run, a new one replaces it. Only your own finished runs with an answer.",
    )
    def put(self, request: Request, run_id: int) -> Response:
        user = request_user(request)
        run = run_selectors.run_get(user=user, run_id=run_id)
        body = FeedbackInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        feedback = services.feedback_set(run=run, user=user, rating=Rating(data["rating"]), reason=data["reason"])
        return Response(FeedbackOutSerializer(feedback).data)

    @extend_schema(operation_id="runs_feedback_destroy", responses={204: None, **NOT_FOUND})
    def delete(self, request: Request, run_id: int) -> Response:
        run = run_selectors.run_get(user=request_user(request), run_id=run_id)
        services.feedback_delete(run=run)
        return Response(status=status.HTTP_204_NO_CONTENT)
