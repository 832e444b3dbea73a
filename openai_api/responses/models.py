"""One ``POST /v1/responses`` call beside its run: the public ``resp_...`` id and what the request asked."""

from __future__ import annotations

from django.db import models


class ResponseRecord(models.Model):
    public_id = models.CharField(
        max_length=64, unique=True, help_text="The response's id ('resp_' and 48 random hex digits): never guessable."
    )
    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="response")
    request = models.JSONField(
        default=dict,
        blank=True,
        help_text="The request's fields the response object repeats (instructions, tools, tool_choice, text, ...).",
    )
    input_items = models.JSONField(
        default=list, blank=True, help_text="The call's own input items, as sent (GET /v1/responses/{id}/input_items)."
    )

    class Meta:
        app_label = "openai_api"

    def __str__(self) -> str:
        return self.public_id
