"""Admission: one atomic Redis step decides whether a prompt may be queued.

Per user, a token bucket (capacity ``C`` tokens, refilled at ``r`` tokens/s) from which a prompt reserves
its input tokens plus its maximum output tokens; a cap on the user's reservations (= runs queued or
streaming); per tier, a bound on the queue depth (runs queued + admissions not yet committed). All checks
and the reservation happen in one Lua script, so web replicas racing on one user can never admit more
than the bucket holds. Refused requests change nothing.

Reservations are members of a sorted set scored by their expiry, reclaimed lazily by the next script that
touches the user. An admission is first *pending* (short expiry: the web process must commit the run and
``bind`` it); ``bind`` renames it after the run with the long run expiry; ``settle`` refunds the unused part
when the run ends. A process that dies between reserve and refund thus loses nothing for longer than an
expiry: the concurrency slot and queue slot come back, and the bucket refills on its own.

Time comes from Redis (``TIME``) so replicas share one clock; tests may pass ``now``.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from enum import StrEnum

import redis

from scheduling.store import RATE_KEY, queued_key

PREFIX = "adm:"


def bucket_key(user_id: int) -> str:
    return f"{PREFIX}bucket:{user_id}"


def reservations_key(user_id: int) -> str:
    return f"{PREFIX}res:{user_id}"


def reserved_tokens_key(user_id: int) -> str:
    return f"{PREFIX}restok:{user_id}"


def pending_key(tier: str) -> str:
    return f"{PREFIX}pending:{tier}"


def run_member(run_id: int) -> str:
    return f"run:{run_id}"


_CLOCK = """
local function now_s(arg)
  if arg and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end
local function refill(bucket, now, cap, rate)
  local state = redis.call('HMGET', bucket, 'tokens', 'ts')
  local tokens = tonumber(state[1])
  local ts = tonumber(state[2])
  if tokens == nil then return cap end
  if now > ts then tokens = tokens + (now - ts) * rate end
  if tokens > cap then tokens = cap end
  return tokens
end
local function reclaim(res, restok, now)
  local expired = redis.call('ZRANGEBYSCORE', res, '-inf', now)
  for _, member in ipairs(expired) do redis.call('HDEL', restok, member) end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', res, '-inf', now) end
end
"""

_ADMIT = (
    _CLOCK
    + """
-- KEYS: bucket, reservations, reserved tokens, tier pending, tier queued, dispatch rate
-- ARGV: now, capacity, refill/s, cost, max concurrent, queue limit, reservation id, pending ttl,
--       key ttl, queue fallback retry
local now = now_s(ARGV[1])
local cap, rate, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local max_conc, qlimit = tonumber(ARGV[5]), tonumber(ARGV[6])
reclaim(KEYS[2], KEYS[3], now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
if cost > cap then return {'too_large', 0, tostring(cap)} end
local running = redis.call('ZCARD', KEYS[2])
if running >= max_conc then return {'concurrency', 0, tostring(running)} end
local depth = redis.call('ZCARD', KEYS[4]) + redis.call('ZCARD', KEYS[5])
if depth >= qlimit then
  local per_s = tonumber(redis.call('GET', KEYS[6]) or '0')
  local wait = tonumber(ARGV[10])
  if per_s > 0 then wait = (depth - qlimit + 1) / per_s end
  return {'queue_full', tostring(wait), tostring(depth)}
end
local tokens = refill(KEYS[1], now, cap, rate)
if tokens < cost then
  local wait = (cost - tokens) / rate
  return {'tokens', tostring(wait), tostring(tokens)}
end
tokens = tokens - cost
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], ARGV[9])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[8]), ARGV[7])
redis.call('HSET', KEYS[3], ARGV[7], cost)
redis.call('PEXPIRE', KEYS[2], ARGV[9])
redis.call('PEXPIRE', KEYS[3], ARGV[9])
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[8]), ARGV[7])
return {'ok', 0, tostring(tokens)}
"""
)

_BIND = (
    _CLOCK
    + """
-- KEYS: reservations, reserved tokens, tier pending; ARGV: now, reservation id, run member, run ttl, key ttl
local now = now_s(ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[2])
local cost = redis.call('HGET', KEYS[2], ARGV[2])
if not cost then return 0 end
redis.call('ZREM', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[3])
redis.call('HSET', KEYS[2], ARGV[3], cost)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
"""
)

_SETTLE = (
    _CLOCK
    + """
-- KEYS: bucket, reservations, reserved tokens, tier pending
-- ARGV: now, member, tokens used, capacity, refill/s, key ttl
-- Returns the tokens refunded, or -1 if the reservation is unknown (settled already, or expired).
local now = now_s(ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[2])
local reserved = tonumber(redis.call('HGET', KEYS[3], ARGV[2]))
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
if reserved == nil then return -1 end
local refund = reserved - tonumber(ARGV[3])
if refund < 0 then refund = 0 end
local cap, rate = tonumber(ARGV[4]), tonumber(ARGV[5])
local tokens = refill(KEYS[1], now, cap, rate) + refund
if tokens > cap then tokens = cap end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return refund
"""
)

_PEEK = (
    _CLOCK
    + """
-- KEYS: bucket; ARGV: now, capacity, refill/s
return tostring(refill(KEYS[1], now_s(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])))
"""
)


class RefusalReason(StrEnum):
    TOKENS = "tokens"
    """The user's token bucket holds less than the prompt would reserve."""
    CONCURRENCY = "concurrency"
    """The user already has as many runs queued or streaming as allowed."""
    QUEUE_FULL = "queue_full"
    """The tier's queue is at its depth limit."""
    TOO_LARGE = "too_large"
    """The prompt alone would reserve more than the bucket can ever hold (retrying cannot help)."""


@dataclass(frozen=True)
class Limits:
    """One user's effective admission limits (their tier's, with any per-user overrides applied)."""

    bucket_capacity_tokens: int
    bucket_refill_per_s: float
    max_concurrent_runs: int
    queue_depth_limit: int


@dataclass(frozen=True)
class BucketTimeouts:
    """How long the scripts keep a reservation, and the queue-full ``Retry-After`` they fall back on."""

    pending_ttl_s: float
    """An admission the web process never committed (and never released) is reclaimed after this long."""
    run_ttl_s: float
    """A committed run's reservation is reclaimed after this long if its end is never reported."""
    queue_retry_after_s: float
    """Retry-After for a full queue when the recent dispatch rate is unknown."""


@dataclass(frozen=True)
class Decision:
    admitted: bool
    reservation_id: str
    cost: int
    reason: RefusalReason | None = None
    retry_after_s: float = 0.0
    detail: float = 0.0
    """Tokens left in the bucket (admitted or refused for tokens), queue depth, or concurrent runs."""


class TokenBuckets:
    """Every user's token bucket and reservations (with the caps checked alongside) over one Redis database: the
    admission scripts, through a client with ``decode_responses=True``."""

    def __init__(self, client: redis.Redis, timeouts: BucketTimeouts) -> None:
        self.client = client
        self.timeouts = timeouts
        self._admit = client.register_script(_ADMIT)
        self._bind = client.register_script(_BIND)
        self._settle = client.register_script(_SETTLE)
        self._peek = client.register_script(_PEEK)

    @property
    def _key_ttl_ms(self) -> int:
        return int(max(self.timeouts.run_ttl_s, self.timeouts.pending_ttl_s) * 1000) + 60_000

    def admit(self, *, user_id: int, tier: str, cost: int, limits: Limits, now: float | None = None) -> Decision:
        reservation_id = f"adm:{uuid.uuid4().hex}"
        reply = self._admit(
            keys=[
                bucket_key(user_id),
                reservations_key(user_id),
                reserved_tokens_key(user_id),
                pending_key(tier),
                queued_key(tier),
                RATE_KEY,
            ],
            args=[
                "" if now is None else repr(now),
                limits.bucket_capacity_tokens,
                repr(float(limits.bucket_refill_per_s)),
                cost,
                limits.max_concurrent_runs,
                limits.queue_depth_limit,
                reservation_id,
                repr(self.timeouts.pending_ttl_s),
                self._key_ttl_ms,
                repr(self.timeouts.queue_retry_after_s),
            ],
        )
        status, retry, detail = reply[0], float(reply[1]), float(reply[2])
        if status == "ok":
            return Decision(admitted=True, reservation_id=reservation_id, cost=cost, detail=detail)
        return Decision(
            admitted=False,
            reservation_id=reservation_id,
            cost=cost,
            reason=RefusalReason(status),
            retry_after_s=retry,
            detail=detail,
        )

    def bind(self, *, user_id: int, tier: str, reservation_id: str, run_id: int, now: float | None = None) -> bool:
        """The run was committed: its reservation now lives as long as a run may, under the run's name."""
        keys, args = self._bind_call(user_id=user_id, tier=tier, reservation_id=reservation_id, run_id=run_id, now=now)
        return bool(self._bind(keys=keys, args=args))

    def bind_in(
        self, pipe: redis.client.Pipeline, *, user_id: int, tier: str, reservation_id: str, run_id: int
    ) -> None:
        """:meth:`bind` queued on ``pipe`` (its reply :meth:`bind`'s), for a caller that sends more in the same round
        trip (``runs.quota``'s admission of a committed run). ``EVAL``: a pipeline holding a registered script first
        asks Redis whether it knows it, a round trip of its own."""
        keys, args = self._bind_call(user_id=user_id, tier=tier, reservation_id=reservation_id, run_id=run_id)
        pipe.eval(_BIND, len(keys), *keys, *args)

    def _bind_call(
        self, *, user_id: int, tier: str, reservation_id: str, run_id: int, now: float | None = None
    ) -> tuple[list[str], list[str | int]]:
        keys = [reservations_key(user_id), reserved_tokens_key(user_id), pending_key(tier)]
        args: list[str | int] = [
            "" if now is None else repr(now),
            reservation_id,
            run_member(run_id),
            repr(self.timeouts.run_ttl_s),
            self._key_ttl_ms,
        ]
        return keys, args

    def settle(
        self, *, user_id: int, tier: str, member: str, used_tokens: int, limits: Limits, now: float | None = None
    ) -> int:
        """Ends a reservation and refunds ``reserved - used`` (at least 0) to the bucket; -1 if unknown.

        ``member`` is the reservation id (nothing was committed: refund all with ``used_tokens=0``) or
        ``run_member(run_id)`` (the run ended). Idempotent: a second settle of one member refunds nothing.
        """
        keys, args = self._settle_call(
            user_id=user_id, tier=tier, member=member, used_tokens=used_tokens, limits=limits, now=now
        )
        return int(self._settle(keys=keys, args=args))

    def settle_in(
        self, pipe: redis.client.Pipeline, *, user_id: int, tier: str, member: str, used_tokens: int, limits: Limits
    ) -> None:
        """:meth:`settle` queued on ``pipe`` (its reply :meth:`settle`'s), for a caller that sends more in the same
        round trip (``runs.quota``'s settlement of an ended run). ``EVAL``: a pipeline holding a registered script
        first asks Redis whether it knows it, a round trip of its own."""
        keys, args = self._settle_call(
            user_id=user_id, tier=tier, member=member, used_tokens=used_tokens, limits=limits
        )
        pipe.eval(_SETTLE, len(keys), *keys, *args)

    def _settle_call(
        self, *, user_id: int, tier: str, member: str, used_tokens: int, limits: Limits, now: float | None = None
    ) -> tuple[list[str], list[str | int]]:
        keys = [bucket_key(user_id), reservations_key(user_id), reserved_tokens_key(user_id), pending_key(tier)]
        args: list[str | int] = [
            "" if now is None else repr(now),
            member,
            used_tokens,
            limits.bucket_capacity_tokens,
            repr(float(limits.bucket_refill_per_s)),
            self._key_ttl_ms,
        ]
        return keys, args

    def bucket_tokens(self, *, user_id: int, limits: Limits, now: float | None = None) -> float:
        """Tokens in the user's bucket now (refilled, not written back)."""
        raw = self._peek(
            keys=[bucket_key(user_id)],
            args=[
                "" if now is None else repr(now),
                limits.bucket_capacity_tokens,
                repr(float(limits.bucket_refill_per_s)),
            ],
        )
        return float(raw)

    def reservations(self, *, user_id: int) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.client.hgetall(reserved_tokens_key(user_id)).items()}


def retry_after_header(seconds: float) -> str:
    """``Retry-After`` in whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
