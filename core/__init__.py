"""Process plumbing that every app of ours stands on, and nothing of any app.

What belongs here: reading the environment into typed settings (``config``), logging (``logs``,
``request_id``), the shared Redis client (``redis_client``), the thread pool for ORM calls from async code
(``db_executor``), ASGI lifespan hooks (``asgi_lifespan``) and the one domain error type with its HTTP mapping
(``errors``). HTTP request and response plumbing lives in :mod:`core.http`.

What does not: anything that knows a chat, a run, a tier or a model. The generation contract that the web tier
and the workers share is :mod:`generation`, one layer up.
"""
