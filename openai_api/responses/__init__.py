"""OpenAI's Responses API (``/v1/responses``) on the chat-completions machinery of :mod:`openai_api`.

- :mod:`~openai_api.responses.input_items`: ``input`` items as chat ``messages`` (and refusals named back).
- :mod:`~openai_api.responses.requests`: the body checked (through ``openai_api.requests.parse_chat_completion``).
- :mod:`~openai_api.responses.models`: :class:`~openai_api.responses.models.ResponseRecord`, a call's id beside its
  run; :mod:`~openai_api.responses.services` and :mod:`~openai_api.responses.selectors` write and read them.
- :mod:`~openai_api.responses.formats`: the response object; :mod:`~openai_api.responses.streaming`: its events.
- :mod:`~openai_api.responses.apis`: the views.
"""
