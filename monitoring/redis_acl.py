"""Redis ACL users, one per role (``manage.py redis_acl`` writes the file; docs/high-availability.md).

Each role's processes set ``REDIS_URL`` with their own user (``redis://web:<password>@host:6379/0``); Celery's
broker (every role's ``CELERY_BROKER_URL``, and Flower) uses the ``celery`` user. A user may run every command
except Redis' ``@dangerous`` ones (``FLUSHALL``, ``CONFIG``, ``KEYS``, ``DEBUG``, ``SHUTDOWN``, ``ACL``, ...; the web
gets ``CLIENT UNBLOCK`` back for its stream relay) on the keys of the prefixes its code uses, read only where it
only reads. The key patterns are built from the code's own prefixes, so a renamed key changes the file.

Which role touches which prefix (from the code that runs in each process):

- ``web``: admission (token buckets ``adm:*``), the scheduler's queues (``sched:*``, pushes and removals), run
  streams (``run:*``, read and the cancel flag; ``runs:cancel`` published), chat summaries (``chat:*``), moderation
  strikes, answer-cache embeddings, usage refusals, the embedding and guard request queues and replies
  (``emb:*``, ``guard:*``), counters (``metrics:*``); workers' heartbeats, readiness and engine metrics read only.
- ``worker`` (generation, embedding and guard workers, summaries): heartbeats, readiness, engine metrics, run
  leases, streams and the active-stream set, the cancel flag and channel, the yield channel (preemptions),
  summaries, request queues and
  replies, moderation strikes and answer-cache embeddings (output moderation, ``run_finish``), the scheduler's
  in-flight set and wake-up list, token buckets (settling a run), counters.
- ``dispatcher`` (and the reaper): the scheduler's keys, token buckets, counters and figures, run leases and
  streams (a requeued run's ``reset``), what ``run_fail`` does after a run (its chat's summary flag, the answer
  cache's stashed embedding, or an embedding request when none was stashed), ``runs:yield`` published (its
  preemptions); workers' heartbeats and readiness read only.
- ``celery``: Celery's broker keys only (the queues, ``_kombu.*``, ``unacked*``, pidbox queues; pub/sub for events
  and remote control), or everything under ``CELERY_BROKER_KEY_PREFIX`` when one is set.
- ``replica`` and ``sentinel``: what Redis' documentation lists for a replica's ``masteruser`` and a Sentinel's
  ``auth-user``.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field

from django.conf import settings

from answer_cache.services import embedding_stash_key
from generation import embedding_contract, guard_contract
from generation.worker_contract import (
    ENGINE_METRICS_PREFIX,
    HEARTBEAT_PREFIX,
    LIVE_WORKERS_KEY,
    READY_DEPLOYMENT_PREFIX,
    cancel_channel,
    summary_pending_key,
    yield_channel,
)
from moderation.services import violation_marker_key
from runs.counters import METRICS_KEY
from runs.dispatcher_figures import COUNTERS_KEY, STATE_KEY
from runs.streaming.contract import active_streams_key
from runs.usage import rejections_key
from scheduling import store, token_bucket
from scheduling.affinity import WORKER_QUEUE_PREFIX
from scheduling.gate_state import GATE_STATE_KEY

ROLES = ("web", "worker", "dispatcher", "celery")
"""The users a deployment runs with (``replica`` and ``sentinel`` are added for the servers themselves)."""

APP_COMMANDS = "+@all -@dangerous"
"""Every command but Redis' dangerous category (server administration, whole-keyspace commands)."""


def _prefix(key: str) -> str:
    return f"{key}*"


def _pattern(sample: str, marker: str) -> str:
    """The pattern of a key function's keys: its key for ``marker`` with the marker replaced by ``*``."""
    return sample.replace(marker, "*")


ID = 987654321  # a sample id for key functions that take one; replaced by "*"

RUN_KEYS = "run:*"
"""A run's stream, lease and cancel flag (``run:{id}:events``, ``:lease``, ``:cancel``)."""
COUNTERS = tuple(
    sorted({key.split(":", 1)[0] + ":*" for key in (METRICS_KEY, COUNTERS_KEY, GATE_STATE_KEY, STATE_KEY)})
)
"""``metrics:runs``, ``metrics:dispatcher`` and the gate states ``metrics:dispatcher:state``: ``metrics:*``."""


@dataclass(frozen=True)
class RoleRights:
    keys: tuple[str, ...]
    """Patterns the role reads and writes (``~pattern``)."""
    read_keys: tuple[str, ...] = ()
    """Patterns the role only reads (``%R~pattern``)."""
    channels: tuple[str, ...] = ()
    """Pub/sub channels it publishes or subscribes to (``&channel``)."""
    commands: str = APP_COMMANDS
    extra_commands: tuple[str, ...] = field(default=())


def _worker_state_keys() -> tuple[str, ...]:
    return (
        _prefix(HEARTBEAT_PREFIX),
        _prefix(ENGINE_METRICS_PREFIX),
        LIVE_WORKERS_KEY,
        _prefix(READY_DEPLOYMENT_PREFIX),
    )


def _request_queues() -> tuple[str, ...]:
    return (
        _prefix(embedding_contract.QUEUE_PREFIX),
        _prefix(embedding_contract.REPLY_PREFIX),
        _prefix(guard_contract.QUEUE_PREFIX),
        _prefix(guard_contract.REPLY_PREFIX),
    )


def _app_keys() -> dict[str, tuple[str, ...]]:
    """Key groups of the application, by what they are for."""
    return {
        "runs": (RUN_KEYS, active_streams_key()),
        "scheduler": (_prefix(store.PREFIX), _prefix(token_bucket.PREFIX)),
        "chats": (_pattern(summary_pending_key(ID), str(ID)),),
        "moderation": (_pattern(violation_marker_key(ID), str(ID)),),
        "answer_cache": (_pattern(embedding_stash_key(ID), str(ID)),),
        "usage": (_pattern(rejections_key(ID), str(ID)),),
        "requests": _request_queues(),
        "counters": COUNTERS,
        "worker_state": _worker_state_keys(),
    }


def broker_key_patterns() -> tuple[str, ...]:
    """Celery's keys on the broker: its queues (each tier's, each worker's, the summaries'), kombu's bindings and
    unacknowledged-message bookkeeping, the remote-control (pidbox) queues; all under the key prefix if set."""
    prefix = str(settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix") or "")
    if prefix:
        return (_prefix(prefix),)
    queues = {*settings.CELERY_TASK_QUEUES_ORDER, settings.CELERY_TASK_DEFAULT_QUEUE, settings.CONTEXT.summary_queue}
    return (
        *(_prefix(queue) for queue in sorted(queues)),  # a tier's queues are "<tier>.<deployment>" (+ priorities)
        _prefix(WORKER_QUEUE_PREFIX),
        "_kombu.*",
        "unacked*",
        "*.pidbox*",  # a worker's own, and its priority lists ("<name>.celery.pidbox\x06\x163")
        "celery*",
    )


def role_rights() -> dict[str, RoleRights]:
    keys = _app_keys()

    def groups(*names: str) -> tuple[str, ...]:
        return tuple(pattern for name in names for pattern in keys[name])

    return {
        "web": RoleRights(
            keys=groups("runs", "scheduler", "chats", "moderation", "answer_cache", "usage", "requests", "counters"),
            read_keys=groups("worker_state"),
            channels=(cancel_channel(),),
            extra_commands=("+client|unblock",),
        ),
        "worker": RoleRights(
            keys=groups("runs", "scheduler", "chats", "moderation", "answer_cache", "requests", "counters")
            + groups("worker_state"),
            channels=(cancel_channel(), yield_channel()),
        ),
        "dispatcher": RoleRights(
            keys=groups("runs", "scheduler", "counters", "chats", "answer_cache", "requests"),
            read_keys=groups("worker_state"),
            channels=(yield_channel(),),  # its preemptions (``request_yields``)
        ),
        "celery": RoleRights(keys=broker_key_patterns(), channels=("*",)),
    }


def default_user_line() -> str:
    """``default``: on, with every key and all but the dangerous commands, and the hash of a random secret that is
    thrown away, so no connection can log in as it (an anonymous one gets ``NOAUTH``).

    Not ``user default off``: a server replaying its append-only file on a restart runs the commands as
    ``default``, and Redis checks the ACL again at each ``EXEC`` (redis/redis#14541, fixed upstream by #14545 in
    2025; Debian's 7.0.15 has it, valkey-io/valkey#3983 is the same). With ``default`` off, every write the file
    holds inside ``MULTI``/``EXEC``, which is how a Lua script's writes are logged, is refused with ``NOPERM`` and
    lost at the restart, silently. The hosts test found it (``ACL LOG`` of a restarted primary);
    ``tests/project/test_redis_acl.py`` restarts a server."""
    unreachable = hashlib.sha256(secrets.token_bytes(32)).hexdigest()
    return f"user default on #{unreachable} resetchannels ~* +@all -@dangerous"


def acl_lines(passwords: dict[str, str]) -> list[str]:
    """The ACL file (``aclfile``): one ``user`` line per role and for the replica and Sentinels, and ``default``
    that nobody can log in as (:func:`default_user_line`)."""
    lines = [default_user_line()]
    for role, rights in role_rights().items():
        parts = [f"user {role} on >{passwords[role]} resetkeys resetchannels"]
        parts += [f"~{pattern}" for pattern in rights.keys]
        parts += [f"%R~{pattern}" for pattern in rights.read_keys]
        parts += [f"&{channel}" for channel in rights.channels]
        parts += ["-@all", rights.commands, *rights.extra_commands]
        lines.append(" ".join(parts))
    lines.append(f"user replica on >{passwords['replica']} -@all +psync +replconf +ping")
    lines.append(
        f"user sentinel on >{passwords['sentinel']} allchannels -@all +multi +slaveof +ping +exec +subscribe"
        " +config|rewrite +role +publish +info +client|setname +client|kill +script|kill"
    )
    return lines


def role_passwords(given: dict[str, str]) -> dict[str, str]:
    """``given`` completed with a random password (32 bytes, hex) for every user without one."""
    return {name: given.get(name) or secrets.token_hex(32) for name in (*ROLES, "replica", "sentinel")}
