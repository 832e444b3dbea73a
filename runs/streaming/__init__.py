"""A run's token stream, from the worker's writes in Redis to the clients, one module per job.

* ``contract``: the stream in Redis (keys, event types, entries, the one writer per run, the terminal event);
* ``load``: how many streams are live, and the coalescing interval the writers take from it;
* ``relay``: one multiplexed ``XREAD`` per web process, fanning entries out to subscriptions;
* ``follow``: replay after ``Last-Event-ID``, live following, Postgres fallback, as :class:`StreamItem` steps;
* ``status_reads``: the batched Postgres status reads of idle streams;
* ``sse``: SSE framing (django-eventstream's, byte for byte);
* ``views``: ``GET /api/runs/{id}/stream``;
* ``asgi``: the ASGI route that serves the long-lived responses without a thread per connection.
"""
