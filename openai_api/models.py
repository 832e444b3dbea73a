"""The app's models (Django finds them here): the Responses API's record of each call."""

from openai_api.responses.models import ResponseRecord

__all__ = ["ResponseRecord"]
