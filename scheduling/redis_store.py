"""The scheduler's queues in Redis (``QueueStore`` for a deployment): web processes push, dispatchers claim,
cancels remove.

Keys (all under ``sched:``; the names and helpers are in ``scheduling.store``):

* ``sched:q:{tier}:{user}``: list of the user's queued run ids in that tier, oldest first.
* ``sched:users:{tier}``: set of users with a non-empty list in the tier (the backlog).
* ``sched:run:{run}``: hash with the queued run's user, tier, cost, weight, enqueue time, deployment and its chat's
  last worker (chat affinity's target).
* ``sched:queued:{tier}``: sorted set of the tier's queued run ids (score: enqueue time); its size is
  the tier's queue depth, which admission bounds.
* ``sched:inflight``: sorted set of dispatched runs that have not ended (score: dispatch time); entries
  older than the in-flight TTL are reclaimed, so a lost "run ended" never blocks the fallback cap forever.
* ``sched:inflight:users``: hash run id -> ``{user}|{deployment}|{tier}`` of the runs in flight (the gate's headroom
  rule needs the user; the per-deployment gate counts each deployment's runs in flight; a preemption picks its run
  by user, tier and deployment).
* ``sched:positions``: hash run id -> JSON ``{queue_position, estimated_wait_s}``, written by the dispatcher.
* ``sched:policy``: the policy's counters (JSON), written by the dispatcher that holds ``sched:leader``.
* ``sched:refunds``: hash ``{tier}:{user}`` -> counter units to give back (runs that ended using fewer tokens
  than charged); the leading dispatcher folds them into the policy's counters.
* ``sched:rate``: recent dispatches per second (admission derives a queue-full ``Retry-After`` from it).
* ``sched:wake``: a list of at most one element, pushed when a run is queued or leaves the in-flight set, and by
  a worker's heartbeat when its engine's running/waiting counts changed; an idle dispatcher blocks on it
  (``BLPOP``, up to one tick) so a new prompt is dispatched at once and a gated one as soon as the engine can
  take it, without polling.

Every mutation is one Lua script, so a claim and a cancel (or two dispatchers) cannot both take a run.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import redis

from scheduling.policy import QueuedRun, UserQueues
from scheduling.store import (
    INFLIGHT_KEY,
    INFLIGHT_USERS_KEY,
    LEADER_KEY,
    POLICY_KEY,
    POSITIONS_KEY,
    PREFIX,
    RATE_KEY,
    REFUNDS_KEY,
    WAKE_KEY,
    InFlight,
    InFlightRun,
    Position,
    Refund,
    TickStart,
    backlog_key,
    queued_key,
    run_meta_key,
    user_queue_key,
)

_PUSH = """
-- KEYS: user queue, backlog set, run meta, tier queued zset, inflight zset, inflight users hash, wake list
-- ARGV: run_id, user_id, tier, cost, weight, now, deployment, front ('1': ahead of the user's other runs),
--       the chat's last worker
if redis.call('ZSCORE', KEYS[4], ARGV[1]) then return 0 end
if ARGV[8] == '1' then redis.call('LPUSH', KEYS[1], ARGV[1]) else redis.call('RPUSH', KEYS[1], ARGV[1]) end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], 'user', ARGV[2], 'tier', ARGV[3], 'cost', ARGV[4], 'weight', ARGV[5], 'enq', ARGV[6],
  'dep', ARGV[7], 'lw', ARGV[9])
redis.call('ZADD', KEYS[4], ARGV[6], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
redis.call('LPUSH', KEYS[7], 1)
redis.call('LTRIM', KEYS[7], 0, 0)
return 1
"""


def wake_dispatcher(client: redis.Redis | redis.client.Pipeline) -> None:
    """Wakes an idle dispatcher (``sched:wake``, at most one element): something its gate reads has changed."""
    client.lpush(WAKE_KEY, 1)
    client.ltrim(WAKE_KEY, 0, 0)


_CLAIM = """
-- KEYS: user queue, backlog set, run meta, tier queued zset, inflight zset, positions hash, inflight users
-- ARGV: run_id, user_id, user_id|deployment|tier, now, prefix ('' : return 1; else also the user's next head)
-- Returns 0 if the run is not at the head of its user's queue. Claimed: 1, or with a prefix {1} when the user has
-- nothing else queued, {1, next run id, its meta hash as field, value, ...} otherwise.
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[1] then return 0 end
redis.call('LPOP', KEYS[1])
local following = redis.call('LINDEX', KEYS[1], 0)
if not following then redis.call('SREM', KEYS[2], ARGV[2]) end
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
redis.call('HSET', KEYS[7], ARGV[1], ARGV[3])
if ARGV[5] == '' then return 1 end
if not following then return {1} end
local reply = {1, following}
for _, v in ipairs(redis.call('HGETALL', ARGV[5] .. 'run:' .. following)) do reply[#reply + 1] = v end
return reply
"""

_REMOVE = """
-- KEYS: run meta, inflight zset, positions hash, inflight users, wake list, refunds hash
-- ARGV: run_id, prefix, refund field ('': none), refund amount (credited only when the run was in flight)
-- Returns 1 if the run was queued (it leaves the queue now), 2 if it was in flight, 0 otherwise.
local removed = 0
local meta = redis.call('HMGET', KEYS[1], 'user', 'tier')
if meta[1] then
  local q = ARGV[2] .. 'q:' .. meta[2] .. ':' .. meta[1]
  redis.call('LREM', q, 0, ARGV[1])
  if redis.call('LLEN', q) == 0 then redis.call('SREM', ARGV[2] .. 'users:' .. meta[2], meta[1]) end
  redis.call('ZREM', ARGV[2] .. 'queued:' .. meta[2], ARGV[1])
  redis.call('DEL', KEYS[1])
  removed = 1
end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 and removed == 0 then
  removed = 2
  redis.call('LPUSH', KEYS[5], 1)  -- a slot freed up: queued runs may fit now
  redis.call('LTRIM', KEYS[5], 0, 0)
  if ARGV[3] ~= '' and tonumber(ARGV[4]) > 0 then redis.call('HINCRBYFLOAT', KEYS[6], ARGV[3], ARGV[4]) end
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return removed
"""

_BEGIN_TICK = """
-- KEYS: leader lock, policy, refunds hash, inflight zset, inflight users hash
-- ARGV: token ('': no lock), lock ttl ms, reclaim in-flight entries dispatched before this, prefix, most users whose
--       heads are read here, tier names...
-- Returns {0} when another token holds the lock; else {1, policy ('' when none), refunds (field, value, ...),
-- in flight (run, score, ...), their owners (run, owner, ...), heads} with heads per tier in ARGV's order, each a
-- list of {user, run, {meta field, value, ...}}, or false when more users are backlogged than ARGV[5].
if ARGV[1] ~= '' then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  elseif not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {0}
  end
end
local policy = redis.call('GET', KEYS[2]) or ''
local refunds = redis.call('HGETALL', KEYS[3])
if #refunds > 0 then redis.call('DEL', KEYS[3]) end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[3])
local members = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
local live = {}
for i = 1, #members, 2 do live[members[i]] = true end
local owners = {}
local all_owners = redis.call('HGETALL', KEYS[5])
for i = 1, #all_owners, 2 do
  if live[all_owners[i]] then
    owners[#owners + 1] = all_owners[i]
    owners[#owners + 1] = all_owners[i + 1]
  else
    redis.call('HDEL', KEYS[5], all_owners[i])
  end
end
local backlogged = 0
for i = 6, #ARGV do backlogged = backlogged + redis.call('SCARD', ARGV[4] .. 'users:' .. ARGV[i]) end
local heads = false
if backlogged <= tonumber(ARGV[5]) then
  heads = {}
  for i = 6, #ARGV do
    local tier = ARGV[i]
    local found = {}
    for _, user in ipairs(redis.call('SMEMBERS', ARGV[4] .. 'users:' .. tier)) do
      local run = redis.call('LINDEX', ARGV[4] .. 'q:' .. tier .. ':' .. user, 0)
      if run then
        local meta = redis.call('HGETALL', ARGV[4] .. 'run:' .. run)
        if #meta > 0 then found[#found + 1] = {user, run, meta} end
      end
    end
    heads[#heads + 1] = found
  end
end
return {1, policy, refunds, members, owners, heads}
"""

TICK_HEADS_MAX_USERS = 256
"""``begin_tick`` reads the heads in its script while at most this many users are backlogged (a bounded time in
Redis's one thread); past it they are read apart, pipelined (``heads``), as Redis serves other clients between."""

_RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_RENEW_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class RedisQueueStore:
    """The queue state in one Redis database (a ``QueueStore``). Thread-safe as far as redis-py's client is."""

    def __init__(self, client: redis.Redis, *, tiers: list[str] | Callable[[], list[str]]) -> None:
        """``tiers``: the tier names in priority order, or a function that reads them when first needed (only
        reading the queues by tier needs them; a push, a removal or a refund does not)."""
        self.client = client
        self._tiers = tiers
        self._push = client.register_script(_PUSH)
        self._claim = client.register_script(_CLAIM)
        self._remove = client.register_script(_REMOVE)
        self._release_lock = client.register_script(_RELEASE_LOCK)
        self._renew_lock = client.register_script(_RENEW_LOCK)
        self._begin_tick = client.register_script(_BEGIN_TICK)

    @property
    def tiers(self) -> list[str]:
        if callable(self._tiers):
            self._tiers = list(self._tiers())
        return self._tiers

    # -- web side ----------------------------------------------------------------------------------

    def push(self, run: QueuedRun, *, front: bool = False) -> bool:
        """Queues ``run`` behind its user's other runs in its tier (ahead of them with ``front``); False if it is
        already queued."""
        keys, args = _push_call(run, front=front)
        return bool(self._push(keys=keys, args=args))

    def push_in(self, pipe: redis.client.Pipeline, run: QueuedRun, *, front: bool = False) -> None:
        """:meth:`push` queued on ``pipe`` (its reply :meth:`push`'s: 1, or 0 when already queued), for a caller that
        sends more in the same round trip (a new prompt's admission, ``runs.quota``). ``EVAL``: a pipeline holding
        a registered script first asks Redis whether it knows it, a round trip of its own."""
        keys, args = _push_call(run, front=front)
        pipe.eval(_PUSH, len(keys), *keys, *args)

    def remove(self, run_id: int) -> int:
        """Takes the run out of the queue (1) or out of the in-flight set (2); 0 when it was in neither."""
        return int(self._remove(keys=_remove_keys(run_id), args=[run_id, PREFIX, "", 0]))

    def remove_in(self, pipe: redis.client.Pipeline, run_id: int, *, refund: Refund) -> None:
        """:meth:`remove` queued on ``pipe``, its reply :meth:`remove`'s, with ``refund`` credited in the same step
        when the run was in flight (2): what :meth:`remove` then :meth:`add_refund` do in two round trips, in the
        caller's one (``runs.quota``'s settlement of an ended run). ``EVAL``, not ``EVALSHA``: a pipeline holding a
        registered script first asks Redis whether it knows it, a round trip of its own."""
        field = _refund_field(refund.tier, refund.user_id)
        pipe.eval(_REMOVE, 6, *_remove_keys(run_id), run_id, PREFIX, field, repr(float(refund.amount)))

    def wait_for_work(self, timeout_s: float) -> bool:
        """Blocks until a run is queued or leaves the in-flight set (True), or ``timeout_s`` passes (False)."""
        return self.client.blpop([WAKE_KEY], timeout=max(timeout_s, 0.001)) is not None

    def is_queued_or_in_flight(self, run_id: int, tier: str) -> bool:
        """Read in this order so a concurrent claim (queued -> in flight) cannot make a run look absent."""
        if self.client.zscore(queued_key(tier), str(run_id)) is not None:
            return True
        return self.client.zscore(INFLIGHT_KEY, str(run_id)) is not None

    def queue_depth(self, tier: str) -> int:
        return int(self.client.zcard(queued_key(tier)))

    def position(self, run_id: int) -> Position | None:
        raw = self.client.hget(POSITIONS_KEY, str(run_id))
        if not raw:
            return None
        data = json.loads(raw)
        return Position(queue_position=int(data["queue_position"]), estimated_wait_s=data["estimated_wait_s"])

    def positions(self, run_ids: list[int]) -> dict[int, Position]:
        if not run_ids:
            return {}
        raws = self.client.hmget(POSITIONS_KEY, [str(rid) for rid in run_ids])
        out: dict[int, Position] = {}
        for run_id, raw in zip(run_ids, raws, strict=True):
            if raw:
                data = json.loads(raw)
                out[run_id] = Position(
                    queue_position=int(data["queue_position"]), estimated_wait_s=data["estimated_wait_s"]
                )
        return out

    # -- dispatcher side ---------------------------------------------------------------------------

    def begin_tick(self, token: str | None, *, ttl_ms: int, now: float, in_flight_ttl_s: float) -> TickStart | None:
        """The lock, the policy, the refunds, the runs in flight and the heads in one script: one round trip where
        the five reads were seven."""
        keys = [LEADER_KEY, POLICY_KEY, REFUNDS_KEY, INFLIGHT_KEY, INFLIGHT_USERS_KEY]
        args: list[str | int | float] = [
            token or "",
            ttl_ms,
            repr(now - in_flight_ttl_s),
            PREFIX,
            TICK_HEADS_MAX_USERS,
            *self.tiers,
        ]
        reply = self._begin_tick(keys=keys, args=args)
        if not reply or not int(reply[0]):
            return None
        _, policy, refunds, members, owners, heads = reply
        sent_at = {str(rid): float(score) for rid, score in zip(members[::2], members[1::2], strict=True)}
        owned = dict(zip((str(rid) for rid in owners[::2]), owners[1::2], strict=True))
        return TickStart(
            policy=json.loads(policy) if policy else {},
            refunds=[_refund(field, value) for field, value in zip(refunds[::2], refunds[1::2], strict=True)],
            in_flight=partial(_in_flight, sent_at, owned),
            heads=None if heads is None else self._heads_of(heads),
        )

    def _heads_of(self, reply: list[Any]) -> dict[str, dict[int, QueuedRun]]:
        heads: dict[str, dict[int, QueuedRun]] = {}
        for tier, found in zip(self.tiers, reply, strict=True):
            for user, run_id, flat in found:
                meta = {str(k): v for k, v in zip(flat[::2], flat[1::2], strict=True)}
                heads.setdefault(tier, {})[int(user)] = _queued_run(tier, int(user), str(run_id), meta)
        return heads

    def _backlogged(self) -> list[tuple[str, int]]:
        """``(tier, user)`` of every user with queued runs, tier by tier."""
        pipe = self.client.pipeline(transaction=False)
        for tier in self.tiers:
            pipe.smembers(backlog_key(tier))
        members: list[set[str]] = pipe.execute()
        return [(tier, int(u)) for tier, users in zip(self.tiers, members, strict=True) for u in users]

    def heads(self) -> dict[str, dict[int, QueuedRun]]:
        """Each backlogged user's first run per tier (read without a lock: ``claim`` re-checks)."""
        pairs = self._backlogged()
        pipe = self.client.pipeline(transaction=False)
        for tier, user in pairs:
            pipe.lindex(user_queue_key(tier, user), 0)
        run_ids = pipe.execute()
        return self._with_meta([(tier, user, rid) for (tier, user), rid in zip(pairs, run_ids, strict=True) if rid])

    def all_queued(self) -> UserQueues:
        """Every queued run, per tier and user, in queue order (for the position forecast)."""
        pairs = self._backlogged()
        pipe = self.client.pipeline(transaction=False)
        for tier, user in pairs:
            pipe.lrange(user_queue_key(tier, user), 0, -1)
        lists = pipe.execute()
        triples = [(tier, user, rid) for (tier, user), ids in zip(pairs, lists, strict=True) for rid in ids]
        queues = UserQueues()
        for users in self._with_meta_list(triples):
            queues.push(users)
        return queues

    def claim(self, run: QueuedRun, *, now: float | None = None) -> bool:
        """Atomically takes ``run`` off the head of its user's queue and marks it in flight.

        True for exactly one caller: a second dispatcher, or a cancel that got there first, sees False.
        """
        return bool(self._run_claim(run, now=now, peek=False))

    def claim_and_peek(self, run: QueuedRun, *, now: float | None = None) -> tuple[bool, QueuedRun | None]:
        """``claim``, and the user's next run in the tier read in the same script: one round trip a decision."""
        reply = self._run_claim(run, now=now, peek=True)
        if not reply:
            return False, None
        if len(reply) < 2:
            return True, None
        fields = [str(v) for v in reply[2:]]
        meta = dict(zip(fields[::2], fields[1::2], strict=True))
        if not meta:  # (its meta is gone: removed meanwhile, the next tick reads the heads again)
            return True, None
        return True, _queued_run(run.tier, run.user_id, str(reply[1]), meta)

    def _run_claim(self, run: QueuedRun, *, now: float | None, peek: bool) -> Any:
        keys = [*_run_keys(run), POSITIONS_KEY, INFLIGHT_USERS_KEY]
        owner = f"{run.user_id}|{run.deployment}|{run.tier}"
        at = now if now is not None else time.time()
        return self._claim(keys=keys, args=[run.run_id, run.user_id, owner, at, PREFIX if peek else ""])

    def in_flight(self, *, now: float, ttl_s: float, since: float | None = None) -> InFlight:
        """The runs in flight (dispatched, not ended); reclaims entries older than ``ttl_s``.

        ``recent`` counts those dispatched at or after ``since`` (not yet visible in the engine statistics).
        """
        pipe = self.client.pipeline(transaction=False)
        pipe.zremrangebyscore(INFLIGHT_KEY, "-inf", f"({now - ttl_s}")
        pipe.zrange(INFLIGHT_KEY, 0, -1, withscores=True)
        pipe.hgetall(INFLIGHT_USERS_KEY)
        _, members, owners = pipe.execute()
        sent_at = {str(rid): float(score) for rid, score in members}
        stale = [rid for rid in owners if rid not in sent_at]
        if stale:
            self.client.hdel(INFLIGHT_USERS_KEY, *stale)
        return _in_flight(sent_at, owners, since)

    def in_flight_runs(self) -> list[InFlightRun]:
        """Every run in flight, oldest dispatch first: one round trip, read only to choose a run to preempt."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zrange(INFLIGHT_KEY, 0, -1, withscores=True)
        pipe.hgetall(INFLIGHT_USERS_KEY)
        members, owners = pipe.execute()
        runs: list[InFlightRun] = []
        for rid, score in members:
            owner = owners.get(rid)
            if owner is None:
                continue
            user, deployment, tier = _owner_fields(owner)
            runs.append(InFlightRun(int(rid), user, tier, deployment, float(score)))
        return runs

    def write_positions(self, positions: dict[int, Position]) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(POSITIONS_KEY)
        if positions:
            pipe.hset(
                POSITIONS_KEY,
                mapping={
                    str(rid): json.dumps({"queue_position": p.queue_position, "estimated_wait_s": p.estimated_wait_s})
                    for rid, p in positions.items()
                },
            )
        pipe.execute()

    def add_refund(self, *, tier: str, user_id: int, amount: float) -> None:
        if amount > 0:
            self.client.hincrbyfloat(REFUNDS_KEY, _refund_field(tier, user_id), amount)

    def take_refunds(self) -> list[tuple[str, int, float]]:
        """Reads and clears the pending refunds in one transaction."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(REFUNDS_KEY)
        pipe.delete(REFUNDS_KEY)
        raw, _ = pipe.execute()
        return [_refund(field, value) for field, value in raw.items()]

    def write_rate(self, per_s: float, *, ttl_s: int = 120) -> None:
        self.client.set(RATE_KEY, f"{per_s:.6f}", ex=ttl_s)

    def load_policy(self) -> dict[str, Any]:
        raw = self.client.get(POLICY_KEY)
        return json.loads(raw) if raw else {}

    def save_policy(self, state: dict[str, Any]) -> None:
        self.client.set(POLICY_KEY, json.dumps(state))

    # -- leadership --------------------------------------------------------------------------------

    def new_lock_token(self) -> str:
        return uuid.uuid4().hex

    def acquire_or_renew_leadership(self, token: str, *, ttl_ms: int) -> bool:
        """One dispatcher decides at a time (the claim script is the last guard against double dispatch)."""
        if self._renew_lock(keys=[LEADER_KEY], args=[token, ttl_ms]):
            return True
        return bool(self.client.set(LEADER_KEY, token, nx=True, px=ttl_ms))

    def release_leadership(self, token: str) -> None:
        self._release_lock(keys=[LEADER_KEY], args=[token])

    # -- helpers -----------------------------------------------------------------------------------

    def _with_meta(self, triples: list[tuple[str, int, str]]) -> dict[str, dict[int, QueuedRun]]:
        heads: dict[str, dict[int, QueuedRun]] = {}
        for run in self._with_meta_list(triples):
            heads.setdefault(run.tier, {})[run.user_id] = run
        return heads

    def _with_meta_list(self, triples: list[tuple[str, int, str]]) -> list[QueuedRun]:
        pipe = self.client.pipeline(transaction=False)
        for _, _, rid in triples:
            pipe.hgetall(run_meta_key(int(rid)))
        metas = pipe.execute()
        # (a run without its meta was claimed or removed since the list was read)
        return [
            _queued_run(tier, user, rid, meta) for (tier, user, rid), meta in zip(triples, metas, strict=True) if meta
        ]


def _run_keys(run: QueuedRun) -> list[str]:
    """The keys a run's push and claim both touch: its user's queue, the tier's backlog, its meta, the tier's queued
    set and the in-flight set."""
    return [
        user_queue_key(run.tier, run.user_id),
        backlog_key(run.tier),
        run_meta_key(run.run_id),
        queued_key(run.tier),
        INFLIGHT_KEY,
    ]


def _push_call(run: QueuedRun, *, front: bool) -> tuple[list[str], list[str | int | float]]:
    keys = [*_run_keys(run), INFLIGHT_USERS_KEY, WAKE_KEY]
    args: list[str | int | float] = [
        run.run_id,
        run.user_id,
        run.tier,
        run.cost,
        run.weight,
        run.enqueued_at or time.time(),
        run.deployment,
        "1" if front else "0",
        run.last_worker,
    ]
    return keys, args


def _remove_keys(run_id: int) -> list[str]:
    return [run_meta_key(run_id), INFLIGHT_KEY, POSITIONS_KEY, INFLIGHT_USERS_KEY, WAKE_KEY, REFUNDS_KEY]


def _refund_field(tier: str, user_id: int) -> str:
    """A user's field in the refunds hash (:func:`_refund` reads it back)."""
    return f"{tier}:{user_id}"


def _refund(field: Any, value: Any) -> tuple[str, int, float]:
    """``(tier, user, amount)`` of a ``sched:refunds`` entry."""
    tier, user = str(field).rsplit(":", 1)
    return tier, int(user), float(value)


def _in_flight(sent_at: dict[str, float], owners: dict[Any, Any], since: float | None) -> InFlight:
    """The counts of the runs in flight (``sent_at``: run -> dispatch time; ``owners``: their
    ``sched:inflight:users`` values), ``recent`` those dispatched at or after ``since``."""
    per_user: Counter[int] = Counter()
    per_deployment: Counter[str] = Counter()
    recent_per_deployment: Counter[str] = Counter()
    for rid, owner in owners.items():
        at = sent_at.get(str(rid))
        if at is None:
            continue
        user, deployment, _tier = _owner_fields(owner)
        per_user[user] += 1
        per_deployment[deployment] += 1
        if since is not None and at >= since:
            recent_per_deployment[deployment] += 1
    recent = sum(1 for at in sent_at.values() if since is not None and at >= since)
    return InFlight(
        total=len(sent_at),
        recent=recent,
        per_user=dict(per_user),
        per_deployment=dict(per_deployment),
        recent_per_deployment=dict(recent_per_deployment),
    )


def _owner_fields(owner: Any) -> tuple[int, str, str]:
    """``(user, deployment, tier)`` of a ``sched:inflight:users`` value (an entry from before the tier was written
    has tier "")."""
    user, _, rest = str(owner).partition("|")
    deployment, _, tier = rest.partition("|")
    return int(user), deployment, tier


def _queued_run(tier: str, user_id: int, run_id: str, meta: dict[str, Any]) -> QueuedRun:
    """The run from its ``sched:run:{run}`` hash (``push``'s fields)."""
    return QueuedRun(
        run_id=int(run_id),
        user_id=user_id,
        tier=tier,
        cost=int(meta["cost"]),
        weight=float(meta.get("weight", 1.0)),
        enqueued_at=float(meta.get("enq", 0.0)),
        deployment=str(meta.get("dep", "")),
        last_worker=str(meta.get("lw", "")),
    )
