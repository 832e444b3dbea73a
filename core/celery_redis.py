"""Celery's broker on Redis: kombu's Redis transport, with one client object per channel instead of one per command.

kombu 5.7's Redis channel builds a new ``redis.Redis`` for every command it sends outside its consumer's
connection (``Channel.conn_or_acquire``): each acknowledgement, each delivery's entry in the unacked index, each
event Celery publishes (``task-received``, ``task-started``, ``task-succeeded``, the worker's heartbeat), each
publish outside a batch. redis-py 8 fills a dict of about 170 response callbacks in every ``Redis.__init__``:
about 0.2 ms of CPU each on the development VM, several times a run on a worker's consumer thread. A client object
holds no connection of its own (its pool does) and is safe to share between threads, so the channel keeps one per
pool and builds it again only when kombu replaces the pool (after a connection error). The commands, the
connections and the pool are kombu's, unchanged.

Selected by ``CELERY_BROKER_TRANSPORT`` (``core.redis_options.broker_transport``); under Sentinel,
``core.celery_sentinel`` uses the same channel behaviour.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class ReusedClientChannel:
    """Mixed into a kombu Redis channel: its synchronous client is built once per connection pool."""

    _reused_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the consumer's own BRPOP and pub/sub connection: kombu caches those clients itself
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool = self.pool  # type: ignore[attr-defined]
        client = self._reused_client
        if client is None or client.connection_pool is not pool:
            client = super()._create_client(asynchronous=False)  # type: ignore[misc]
            self._reused_client = client
        return client


class Channel(ReusedClientChannel, kombu_redis.Channel):  # type: ignore[misc]
    pass


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel
