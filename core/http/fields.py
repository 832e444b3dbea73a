"""Serializer fields every app's request bodies use: strict types, no silent coercion."""

from __future__ import annotations

from typing import Any

from django.core.validators import ProhibitNullCharactersValidator
from rest_framework import serializers

from core.http.text import text_problem


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers, lists and objects instead of coercing them to text, text that Postgres
    cannot store (a NUL, a lone surrogate: ``core.http.text``), and text longer than ``max_length`` even when the
    excess is whitespace that trimming would remove (the schema's ``maxLength`` is about what is sent).

    ``allow_nul``: the value goes to a ``core.nul_text.NulSafeTextField``, which stores NUL losslessly."""

    default_error_messages = {
        "not_text": "must be a string.",
        "too_long": "is {length} characters long; the limit is {max_length}.",
    }

    def __init__(self, *, allow_nul: bool = False, **kwargs: Any) -> None:
        self.allow_nul = allow_nul
        super().__init__(**kwargs)
        if allow_nul:  # DRF's CharField refuses NUL itself ("Null characters are not allowed")
            self.validators = [v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)]

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_text")
        problem = text_problem(data, nul_ok=self.allow_nul)
        if problem is not None:
            raise serializers.ValidationError(problem, code="unstorable_text")
        if self.max_length is not None and len(data) > self.max_length:
            self.fail("too_long", length=len(data), max_length=self.max_length)
        return str(super().to_internal_value(data))


class StrictIntegerField(serializers.IntegerField):
    """An IntegerField that refuses strings, booleans and fractions instead of coercing them."""

    default_error_messages = {"not_integer": "must be an integer."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("not_integer")
        return int(super().to_internal_value(data))


class StrictFloatField(serializers.FloatField):
    """A FloatField that refuses strings and booleans instead of coercing them."""

    default_error_messages = {"not_number": "must be a number."}

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("not_number")
        return float(super().to_internal_value(data))


class StrictBooleanField(serializers.BooleanField):
    """A BooleanField that takes only ``true`` and ``false`` (JSON), not ``"yes"``, ``1`` or ``"on"``."""

    default_error_messages = {"not_boolean": "must be true or false."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("not_boolean")
        return data
