"""Celery's broker under Sentinel: kombu's Sentinel transport with two changes, selected by
``CELERY_BROKER_TRANSPORT`` when ``REDIS_SENTINELS`` is set (``core.redis_options.broker_transport``).

The crash they fix (kombu 5.7.0): a worker holding an unacknowledged task (late acks: every run in flight) when
the primary dies. On the connection error Celery's consumer calls ``Connection.collect()`` and then
``close()``. ``collect`` clears the transport's ``client`` even when closing the channels did not finish (the
Sentinels still name the dead primary; the socket times out). ``close`` then closes the consumer's channel,
which restores the unacknowledged tasks through a pool it rebuilds from that ``client``
(``Channel._connparams``), and the worker dies with ``Unrecoverable error: AttributeError("'NoneType' object has
no attribute 'hostname'")``. The acknowledgement of the task still running fails the same way later. Both are
reproduced by ``tests/project/test_redis_sentinel.py``, a real worker whose task spans a ``SIGKILL`` of the
primary. The channel here keeps its own reference to the connection's parameters.

The second change: every Sentinel is a transport option (``sentinels``) and the URL names one, instead of
``sentinel://a;sentinel://b;...``. kombu treats those as failover alternates and ``Connection.switch``es to the
next on every error, closing the transport the same way; with one URL the connection reconnects in place, and
the pool asks every Sentinel for the current primary.

Like the plain transport (``core.celery_redis``), the channel builds its synchronous client once per pool.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis import Redis
from redis.sentinel import Sentinel

from core.celery_redis import ReusedClientChannel


class SentinelChannel(ReusedClientChannel, kombu_redis.SentinelChannel):  # type: ignore[misc]
    from_transport_options = (*kombu_redis.SentinelChannel.from_transport_options, "sentinels")  # type: ignore[assignment]

    sentinels: list[tuple[str, int]] | None = None
    """Every Sentinel, ``[(host, port), ...]``; None: kombu's own reading of the URL."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._conninfo = self.connection.client

    def _connparams(self, asynchronous: bool = False) -> Any:
        transport = self.connection
        if transport is not None and transport.client is None:
            # Connection.collect() let go of it while this channel still had tasks to restore or acknowledge.
            transport.client = self._conninfo
        return super()._connparams(asynchronous)

    def _sentinel_managed_pool(self, asynchronous: bool = False) -> Any:
        if not self.sentinels:
            return super()._sentinel_managed_pool(asynchronous)
        master_name = getattr(self, "master_name", None)
        if master_name is None:
            raise ValueError("'master_name' transport option must be specified.")
        params = {k: v for k, v in self._connparams(asynchronous).items() if k not in ("host", "port")}
        manager = Sentinel(
            [(host, int(port)) for host, port in self.sentinels],
            min_other_sentinels=getattr(self, "min_other_sentinels", 0) or 0,
            sentinel_kwargs=getattr(self, "sentinel_kwargs", None),
            **params,
        )
        # kombu closes these Sentinel connections with the channel's pools (its _disconnect_pools).
        if asynchronous:
            self._async_sentinel_manager = manager
        else:
            self._sentinel_manager = manager
        login = {k: params[k] for k in ("username", "password") if k in params}
        return manager.master_for(master_name, Redis, **login).connection_pool


class SentinelTransport(kombu_redis.SentinelTransport):  # type: ignore[misc]
    Channel = SentinelChannel
