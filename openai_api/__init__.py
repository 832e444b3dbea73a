"""An OpenAI-compatible API (``/v1/models``, ``/v1/chat/completions``) over the same runs, queues and limits."""
