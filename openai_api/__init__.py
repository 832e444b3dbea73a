"""An OpenAI-compatible API (``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``) over the same runs,
queues and limits."""
