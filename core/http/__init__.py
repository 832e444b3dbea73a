"""HTTP plumbing for the DRF APIs: request bodies, parsing, pagination, serializer fields and text checks.

What belongs here: how a request body is read and bounded (``json_body``, ``parsers``), cursor pagination
(``pagination``), serializer base classes and fields shared by every API (``serializers``, ``fields``) and the
text checks their messages use (``text``). Nothing here knows an app's models.
"""
