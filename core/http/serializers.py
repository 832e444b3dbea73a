"""The base of every ``/api`` request body: a field it does not know is a 400 naming it, never ignored.

DRF drops keys a serializer has no field for, so ``POST /api/chats/{id}/messages {"content", "stop": [...]}``
was accepted and ran without the stop sequence the client asked for. ``/v1`` already refuses what it does not
implement; here every unknown key is refused, with the fields the endpoint does accept. The schema says so
too (``additionalProperties: false``), so schema and behaviour agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from core.http.text import echo


class StrictSerializer(serializers.Serializer[Any]):
    default_error_messages = {"unknown_field": "is not a field of this request; it accepts {accepted}."}

    def accepted_fields(self) -> list[str]:
        return [name for name, field in self.fields.items() if not field.read_only]

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            accepted = self.accepted_fields()
            unknown = [key for key in data if key not in accepted]
            if unknown:
                message = self.error_messages["unknown_field"].format(accepted=", ".join(accepted) or "no fields")
                raise serializers.ValidationError({echo(key): [message] for key in unknown[:10]}, code="unknown_field")
        return super().to_internal_value(data)


class StrictSerializerSchema(OpenApiSerializerExtension):
    """drf-spectacular: a strict body's schema admits no property beyond its fields."""

    target_class = StrictSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        return {**schema, "additionalProperties": False}
