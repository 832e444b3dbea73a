"""Connection options derived from :class:`core.config.RedisConnectionConfig`, without Django: the clients of
``core.redis_client`` and the settings module (Celery's broker) both build theirs here, so one set of variables
(``REDIS_SENTINELS``, ``REDIS_TLS_CA_FILE``, ...) configures every connection of a process."""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import urlsplit

from core.config import RedisConnectionConfig


def tls_options(config: RedisConnectionConfig) -> dict[str, Any]:
    """redis-py's TLS arguments: the server's certificate must chain to ``REDIS_TLS_CA_FILE`` and name its host."""
    options: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_check_hostname": True}
    if config.tls_ca_file:
        options["ssl_ca_certs"] = config.tls_ca_file
    if config.tls_cert_file:
        options["ssl_certfile"] = config.tls_cert_file
        options["ssl_keyfile"] = config.tls_key_file or None
    return options


def sentinel_options(
    config: RedisConnectionConfig, *, socket_timeout: float, socket_connect_timeout: float
) -> dict[str, Any]:
    """The arguments of the connections to the Sentinels themselves (their password, TLS, timeouts)."""
    options: dict[str, Any] = {"socket_timeout": socket_timeout, "socket_connect_timeout": socket_connect_timeout}
    if config.sentinel_username:
        options["username"] = config.sentinel_username
    if config.sentinel_password:
        options["password"] = config.sentinel_password
    if config.sentinel_tls:
        options.update(ssl=True, **tls_options(config))
    return options


SENTINEL_TRANSPORT = "core.celery_sentinel:SentinelTransport"
"""Celery's broker transport under Sentinel (``CELERY_BROKER_TRANSPORT``): kombu's, given the Sentinels as an
option rather than as failover alternates (see ``core.celery_sentinel`` for the worker crash that avoids)."""


def broker_url(url: str, config: RedisConnectionConfig) -> str:
    """Celery's broker URL: ``url`` itself, or under Sentinel a ``sentinel://`` URL of the first Sentinel that keeps
    ``url``'s user, password and database (every Sentinel is in :func:`broker_transport_options`)."""
    if not config.uses_sentinel or url.startswith("sentinel://"):
        return url  # (already derived: a child process given its parent's settings)
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    auth = f"{userinfo}@" if userinfo else ""
    host, port = config.sentinels[0]
    return f"sentinel://{auth}{host}:{port}{parts.path}"


REDIS_TRANSPORT = "core.celery_redis:Transport"
"""Celery's broker transport without Sentinel: kombu's Redis transport, one client object per channel."""


def broker_transport(config: RedisConnectionConfig, url: str = "") -> str | None:
    """Celery's ``broker_transport``: :data:`SENTINEL_TRANSPORT` under Sentinel; :data:`REDIS_TRANSPORT` for a
    ``redis://`` or ``rediss://`` broker ``url`` (TLS comes from ``broker_use_ssl``); else None (the URL's scheme)."""
    if config.uses_sentinel:
        return SENTINEL_TRANSPORT
    return REDIS_TRANSPORT if url.startswith(("redis://", "rediss://")) else None


def broker_transport_options(
    config: RedisConnectionConfig, *, socket_timeout: float, socket_connect_timeout: float
) -> dict[str, Any]:
    """What the Sentinel transport needs beyond the URL: every Sentinel, the primary's name, how to log in to the
    Sentinels (nothing without Sentinel)."""
    if not config.uses_sentinel:
        return {}
    return {
        "master_name": config.sentinel_master,
        "sentinels": [(host, port) for host, port in config.sentinels],
        "sentinel_kwargs": sentinel_options(
            config, socket_timeout=socket_timeout, socket_connect_timeout=socket_connect_timeout
        ),
    }


def broker_use_ssl(url: str, config: RedisConnectionConfig) -> dict[str, Any] | None:
    """Celery's ``broker_use_ssl`` for a ``rediss://`` broker URL (also under Sentinel, where the URL kombu gets
    says ``sentinel://``); None for a plain one."""
    if not url.startswith("rediss://"):
        return None
    return tls_options(config)
