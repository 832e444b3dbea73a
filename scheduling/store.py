"""The scheduler's queue store: the contract between the web processes, the dispatcher and the queue state.

Web processes ``push`` admitted runs and ``remove`` them when they are cancelled or end; the dispatcher reads
the backlog (``heads``, ``all_queued``), claims the run the policy chose (``claim``) and counts the runs in flight.
Each consumer sees only the role it uses, a small ``Protocol`` (mypy then proves it uses nothing more):

* ``DispatcherStore``: the dispatcher (the backlog, claims, runs in flight, positions and rate it publishes, the
  policy state and refunds it keeps, the leader lock).
* ``RunQueueWriter``: the quota path around a run (queue it once committed; take it out and refund it once ended).
* ``QueueMembership``: the reaper (is a run Postgres calls queued known here?).
* ``QueueDepths``: the metrics (queue depth per tier).
* ``QueuePositions``: the API (the queued runs' positions and estimated waits).

``QueueStore`` is their union, the whole interface; two implementations keep the same semantics:

* ``scheduling.redis_store.RedisQueueStore``: the shared state of a deployment (every mutation one Lua script).
* ``scheduling.memory_store.MemoryQueueStore``: one process's memory (tests, the virtual-time benchmark), so the
  real ``Dispatcher`` runs without Redis.

What both guarantee:

* ``push`` is idempotent (a run already queued is not queued twice) and takes a run out of the in-flight set
  (a run sent back to its queue is queued, not in flight).
* ``claim`` succeeds only for the head of the run's user queue in its tier, and for exactly one caller: a second
  dispatcher, or a cancel that got there first, sees False.
* ``remove`` returns 1 when the run was queued (it leaves the queue), 2 when it was in flight (its slot frees
  up), 0 when it was in neither.
* ``push(front=True)`` queues the run ahead of its user's other runs (a run handed back mid-answer goes on first).
* ``in_flight`` reclaims runs dispatched more than ``ttl_s`` ago (a lost "run ended" must not hold a slot
  forever) and counts as ``recent`` those dispatched at or after ``since``; ``in_flight_runs`` lists them, each
  with its user, tier, deployment and dispatch time (the dispatcher's choice of a run to preempt).
* Refunds accumulate per ``(tier, user)`` until the dispatcher takes them; the policy state is an opaque JSON-able
  dict; leadership is a lock with a time to live held by one token at a time.
* ``begin_tick`` is the lock, the policy state, the refunds, the runs in flight and the heads read at once (one
  round trip for Redis), the same as the five calls in turn.

The Redis key names stay here, not in ``redis_store``: ``scheduling.token_bucket``'s Lua script reads the queue depth
(``queued_key``) and the dispatch rate (``RATE_KEY``) in the same round trip as the bucket.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduling.policy import QueuedRun, UserQueues

PREFIX = "sched:"
INFLIGHT_KEY = f"{PREFIX}inflight"
INFLIGHT_USERS_KEY = f"{PREFIX}inflight:users"
POSITIONS_KEY = f"{PREFIX}positions"
POLICY_KEY = f"{PREFIX}policy"
LEADER_KEY = f"{PREFIX}leader"
RATE_KEY = f"{PREFIX}rate"
REFUNDS_KEY = f"{PREFIX}refunds"
WAKE_KEY = f"{PREFIX}wake"


def user_queue_key(tier: str, user_id: int) -> str:
    return f"{PREFIX}q:{tier}:{user_id}"


def backlog_key(tier: str) -> str:
    return f"{PREFIX}users:{tier}"


def run_meta_key(run_id: int) -> str:
    return f"{PREFIX}run:{run_id}"


def queued_key(tier: str) -> str:
    return f"{PREFIX}queued:{tier}"


@dataclass(frozen=True)
class InFlight:
    total: int
    recent: int
    per_user: dict[int, int]
    per_deployment: dict[str, int] = field(default_factory=dict)
    """Runs in flight per deployment (``""``: runs sent without one)."""
    recent_per_deployment: dict[str, int] = field(default_factory=dict)
    """Of ``recent``, per deployment."""


@dataclass(frozen=True)
class InFlightRun:
    """One run in flight, as the claim recorded it."""

    run_id: int
    user_id: int
    tier: str
    """"" for an entry written before the tier was recorded (such a run is never preempted)."""
    deployment: str
    sent_at: float


@dataclass(frozen=True)
class TickStart:
    """What a dispatcher's tick starts from, read in one step by the leader (``DispatcherStore.begin_tick``)."""

    policy: dict[str, Any]
    """The policy state the leader saved last ({} when none), as ``load_policy`` reads it."""
    refunds: list[tuple[str, int, float]]
    """The pending refunds, taken (cleared), as ``take_refunds`` returns them."""
    in_flight: Callable[[float | None], InFlight]
    """The runs in flight as read then (those dispatched more than the TTL ago reclaimed), counted as ``in_flight``
    counts them for a ``since``: a function of it, since the engine statistics that give it are read after."""
    heads: dict[str, dict[int, QueuedRun]] | None
    """``heads()`` as read then; None when more users were backlogged than the step reads (``heads()`` reads them
    apart)."""


@dataclass(frozen=True)
class Refund:
    """Counter units credited back to a user when their dispatched run ends using fewer tokens than it was charged."""

    tier: str
    user_id: int
    amount: float


@dataclass(frozen=True)
class Position:
    queue_position: int
    """1 = the next run to be dispatched."""
    estimated_wait_s: float | None


class DispatcherStore(Protocol):
    """The store as ``scheduling.dispatcher.Dispatcher`` drives it: read the backlog and the runs in flight, claim
    the run the policy chose (and push it back when sending fails), publish the positions and the dispatch rate,
    keep the policy's counters and pending refunds, hold the leader lock, and idle until there is work."""

    @property
    def tiers(self) -> list[str]:
        """The tier names whose queues ``heads`` and ``all_queued`` read (callers pass them in priority order)."""
        ...

    # -- the backlog and the runs in flight ---------------------------------------------------------

    def begin_tick(self, token: str | None, *, ttl_ms: int, now: float, in_flight_ttl_s: float) -> TickStart | None:
        """Takes or renews the leader lock for ``token`` (None: no lock), then reads what a tick starts from, as
        ``load_policy``, ``take_refunds``, ``in_flight`` and ``heads`` would, in one atomic step; None (nothing
        read or taken) when another token holds the lock."""
        ...

    def wait_for_work(self, timeout_s: float) -> bool:
        """Waits until a run is queued or leaves the in-flight set (True), or at most ``timeout_s`` (False)."""
        ...

    def heads(self) -> dict[str, dict[int, QueuedRun]]:
        """Each backlogged user's first run per tier (read without a lock: ``claim`` re-checks)."""
        ...

    def all_queued(self) -> UserQueues:
        """Every queued run, per tier and user, in queue order (for the position forecast)."""
        ...

    def claim(self, run: QueuedRun, *, now: float | None = None) -> bool:
        """Atomically takes ``run`` off the head of its user's queue and marks it in flight since ``now``."""
        ...

    def claim_and_peek(self, run: QueuedRun, *, now: float | None = None) -> tuple[bool, QueuedRun | None]:
        """``claim``, and (when claimed) the user's next run in ``tier`` read in the same atomic step (None: none
        queued): the dispatcher's next head for that user, in one round trip with the claim, instead of reading
        every user's heads again."""
        ...

    def push(self, run: QueuedRun, *, front: bool = False) -> bool:
        """Queues ``run`` behind its user's other runs in its tier (a claimed run whose sending failed goes
        back), or ahead of them with ``front``; False if it is already queued."""
        ...

    def remove(self, run_id: int) -> int:
        """Takes the run out of the queue (1) or out of the in-flight set (2); 0 when it was in neither."""
        ...

    def in_flight(self, *, now: float, ttl_s: float, since: float | None = None) -> InFlight:
        """The runs in flight (``recent``: dispatched at or after ``since``); reclaims those older than ``ttl_s``."""
        ...

    def in_flight_runs(self) -> list[InFlightRun]:
        """Every run in flight, oldest dispatch first (read only when the dispatcher looks for a run to preempt)."""
        ...

    # -- what the leader publishes and keeps --------------------------------------------------------

    def write_positions(self, positions: dict[int, Position]) -> None:
        """Replaces every queued run's position with ``positions``."""
        ...

    def write_rate(self, per_s: float, *, ttl_s: int = 120) -> None:
        """Publishes the recent dispatch rate for ``ttl_s`` seconds (the token bucket's ``Retry-After`` uses it)."""
        ...

    def take_refunds(self) -> list[tuple[str, int, float]]:
        """Reads and clears the pending refunds as ``(tier, user, amount)``, atomically."""
        ...

    def load_policy(self) -> dict[str, Any]:
        """The policy state the leader saved last ({} when none); the caller must not change it."""
        ...

    def save_policy(self, state: dict[str, Any]) -> None:
        """Saves the policy state (a JSON-able dict, not changed afterwards) for the next tick or the next leader."""
        ...

    # -- leadership ---------------------------------------------------------------------------------

    def new_lock_token(self) -> str:
        """A token that identifies one dispatcher to the leader lock."""
        ...

    def acquire_or_renew_leadership(self, token: str, *, ttl_ms: int) -> bool:
        """Takes the leader lock for ``ttl_ms``, or renews it if ``token`` holds it; False if another holds it."""
        ...

    def release_leadership(self, token: str) -> None:
        """Gives the leader lock up if ``token`` holds it."""
        ...


class RunQueueWriter(Protocol):
    """The store as the quota path around a run writes it: ``runs.queueing.run_enqueue`` queues a committed run,
    and ``runs.quota.run_account_end`` takes an ended run out and credits its unused tokens back to the user's
    fair-share counter."""

    def push(self, run: QueuedRun, *, front: bool = False) -> bool:
        """Queues ``run`` behind its user's other runs in its tier (ahead of them with ``front``: a run handed back
        mid-answer); False if it is already queued."""
        ...

    def remove(self, run_id: int) -> int:
        """Takes the run out of the queue (1) or out of the in-flight set (2); 0 when it was in neither."""
        ...

    def add_refund(self, *, tier: str, user_id: int, amount: float) -> None:
        """Credits ``amount`` counter units back to the user (a dispatched run ended using fewer tokens)."""
        ...


class QueueMembership(Protocol):
    """The store as ``runs.reaper.requeue_lost_runs`` reads it: whether a run Postgres calls queued is known here."""

    def is_queued_or_in_flight(self, run_id: int, tier: str) -> bool:
        """Whether the store knows the run at all (a run it does not know lost its push and is queued again)."""
        ...


class QueueDepths(Protocol):
    """The store as ``monitoring.prometheus`` reads it for ``/metrics``: the queue depth of every tier."""

    @property
    def tiers(self) -> list[str]:
        """The tier names, in priority order."""
        ...

    def queue_depth(self, tier: str) -> int:
        """The number of runs queued in ``tier`` (the token bucket's script bounds it)."""
        ...


class QueuePositions(Protocol):
    """The store as the API reads it (``runs.selectors.run_queue_positions``): the queued runs' positions and waits,
    as the dispatcher last forecast them."""

    def position(self, run_id: int) -> Position | None:
        """The queued run's last forecast position and wait; None when it has none (dispatched, or not yet)."""
        ...

    def positions(self, run_ids: list[int]) -> dict[int, Position]:
        """:meth:`position` of several runs in one read; runs without a position are absent."""
        ...


class QueueStore(DispatcherStore, RunQueueWriter, QueueMembership, QueueDepths, QueuePositions, Protocol):
    """The whole store: every role above, which each backend (``RedisQueueStore``, ``MemoryQueueStore``)
    implements and the contract tests (``tests/scheduling/test_store_contract.py``) hold both to. Consumers take
    the role they use, not this."""
