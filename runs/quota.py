"""The quota adapter: the user's limits from the database applied through the token bucket in Redis
(``scheduling.token_bucket``).

``quota_reserve`` runs before ``run_create``'s transaction and raises a 429 ``TooManyRequestsError``
(with ``Retry-After``) when a limit is hit, so a refused prompt writes nothing. The reservation is bound to
the run when the transaction commits and released otherwise. ``run_account_end`` is called by the one
service step that ends a run (``runs.services``): it records the day's usage and, after commit, refunds the
unused tokens and takes the run out of the scheduler's queue (a run cancelled while queued leaves it at
once) or out of the in-flight set.

What a run is charged: the tokens of the new message plus the output tokens it produced. It reserves the
new message plus ``max_tokens``; the chat history the worker prepends is not charged (it is mostly served
from vLLM's prefix cache and is bounded by the tier's context limit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import redis
from django.conf import settings
from django.db import transaction

from accounts.limits import EffectiveLimits, usage_record, user_limits
from accounts.models import User
from core.errors import REDIS_OUTAGE_ERRORS, DomainError, TooManyRequestsError
from core.redis_client import get_redis
from runs.counters import record_admitted_in, record_refused, record_run_end_in
from runs.lifecycle_log import RunStep, log_run_step, log_step
from runs.models import Run, RunStatus
from runs.queueing import get_scheduler_store
from runs.usage import rejection_record, usage_summary
from scheduling.store import Refund
from scheduling.token_bucket import BucketTimeouts, Limits, RefusalReason, TokenBuckets, retry_after_header, run_member

logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def get_token_buckets() -> TokenBuckets:
    """The token-bucket scripts over the shared Redis, with the scheduler's reservation timeouts."""
    cfg = settings.SCHEDULER
    return TokenBuckets(
        get_redis(),
        BucketTimeouts(
            pending_ttl_s=cfg.admission_pending_ttl_s,
            run_ttl_s=cfg.admission_run_ttl_s,
            queue_retry_after_s=cfg.queue_retry_after_s,
        ),
    )


def bucket_limits(eff: EffectiveLimits) -> Limits:
    return Limits(
        bucket_capacity_tokens=eff.bucket_capacity_tokens,
        bucket_refill_per_s=eff.bucket_refill_per_s,
        max_concurrent_runs=eff.max_concurrent_runs,
        queue_depth_limit=eff.queue_depth_limit,
    )


_REFUSALS = {
    RefusalReason.TOKENS: "token budget",
    RefusalReason.CONCURRENCY: "concurrent runs",
    RefusalReason.QUEUE_FULL: "queue depth",
}


@dataclass
class QuotaTicket:
    """A reservation made by ``quota_reserve``; bound to the run on commit, released otherwise."""

    user_id: int
    tier: str
    reservation_id: str
    cost: int
    input_tokens: int
    limits: EffectiveLimits
    bound: bool = field(default=False)

    def bind_on_commit(
        self,
        run: Run,
        *,
        hand_on: Callable[[redis.client.Pipeline], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> None:
        """After commit, in one round trip to Redis: the reservation becomes the run's, the admission is counted, and
        what ``hand_on`` queues on the same pipeline goes too (``runs.queueing.run_enqueue``'s push: three round trips
        before); ``then`` runs once Redis has answered (a cached answer, which ends the run, settling what was bound).
        A Redis error propagates, as the bind's did: the run is in Postgres, and the reaper queues a run the scheduler
        does not know."""

        def bind_and_hand_on() -> None:
            self.bound = True
            log_run_step(  # (the log records go before the round trip they describe; a failure is logged after them)
                RunStep.ADMITTED,
                run,
                f"run {run.pk} admitted: {self.cost} tokens reserved ({self.input_tokens} input)",
                reserved_tokens=self.cost,
                input_tokens=self.input_tokens,
                max_tokens=run.max_tokens,
            )
            pipe = get_redis().pipeline(transaction=False)
            get_token_buckets().bind_in(
                pipe, user_id=self.user_id, tier=self.tier, reservation_id=self.reservation_id, run_id=run.pk
            )
            record_admitted_in(pipe, tier=self.tier)
            if hand_on is not None:
                hand_on(pipe)
            pipe.execute()
            if then is not None:
                then()

        transaction.on_commit(bind_and_hand_on)

    def release_unless_bound(self) -> None:
        """Gives the whole reservation back when the run was never committed (an error, a 409, a rollback)."""
        if self.bound or transaction.get_connection().in_atomic_block:
            return  # bound, or an outer transaction may still commit it (else the pending expiry reclaims it)
        get_token_buckets().settle(
            user_id=self.user_id,
            tier=self.tier,
            member=self.reservation_id,
            used_tokens=0,
            limits=bucket_limits(self.limits),
        )


def quota_reserve(*, user: User, limits: EffectiveLimits, input_tokens: int, max_tokens: int) -> QuotaTicket:
    """Admits a prompt or raises ``TooManyRequestsError`` (429, ``Retry-After``) saying which limit was hit.

    ``limits`` are the user's effective limits (``user_limits``) and ``input_tokens`` the new message's
    tokens, both already computed by the caller for the same prompt.
    """
    cost = input_tokens + max_tokens
    try:
        decision = get_token_buckets().admit(user_id=user.pk, tier=limits.tier, cost=cost, limits=bucket_limits(limits))
    except REDIS_OUTAGE_ERRORS:
        raise  # Redis not answering: BackendOutageMiddleware's 503, with the configured Retry-After
    except redis.RedisError as exc:  # Redis answered with an error (a script refused, out of memory)
        logger.exception("admission unavailable")
        raise DomainError(
            "The service is temporarily unavailable (admission failed in Redis); retry shortly.",
            code="unavailable",
            status_code=503,
            headers={"Retry-After": str(settings.OUTAGES.retry_after_s)},
        ) from exc
    if decision.admitted:
        return QuotaTicket(
            user_id=user.pk,
            tier=limits.tier,
            reservation_id=decision.reservation_id,
            cost=cost,
            input_tokens=input_tokens,
            limits=limits,
        )
    reason = decision.reason
    record_refused(tier=limits.tier, reason=str(reason))
    log_step(
        RunStep.REFUSED,
        f"prompt of user {user.pk} refused ({reason}): it would reserve {cost} tokens",
        run_id=None,
        user_id=user.pk,
        tier=limits.tier,
        reason=str(reason),
        reserved_tokens=cost,
    )
    if reason == RefusalReason.TOO_LARGE:
        raise DomainError(
            f"This prompt would reserve {cost} tokens ({input_tokens} input + {max_tokens} max output), more than "
            f"your token budget of {limits.bucket_capacity_tokens} can ever hold: shorten it or lower max_tokens.",
            code="prompt_too_large",
        )
    retry_s = decision.retry_after_s
    if reason == RefusalReason.TOKENS:
        message = (
            f"Token budget exhausted: this prompt needs {cost} tokens and your budget holds {int(decision.detail)} "
            f"(it refills at {limits.bucket_refill_per_s:g} tokens/s)."
        )
    elif reason == RefusalReason.CONCURRENCY:
        retry_s = settings.SCHEDULER.concurrency_retry_after_s
        message = (
            f"Too many runs at once: you have {limits.max_concurrent_runs} queued or streaming, the most your "
            f"{limits.tier} tier allows; wait for one to finish."
        )
    else:
        message = f"The {limits.tier} queue is full ({int(decision.detail)} runs waiting): the service is busy."
    header = retry_after_header(retry_s)
    refusal = TooManyRequestsError(
        f"{message} Retry in {header} s.", code=f"limit_{reason}", headers={"Retry-After": header}
    )
    rejection_record(user_id=user.pk, code=refusal.code, reason=refusal.message)
    raise refusal


def quota_usage(*, user: User) -> dict[str, object]:
    """``GET /api/usage``: the user's limits, bucket, daily usage and last refusals (``runs.usage``)."""
    limits = user_limits(user=user)
    return usage_summary(user=user, limits=limits, buckets=get_token_buckets(), bucket_limits=bucket_limits(limits))


def run_account_end(
    *, run: Run, usage_recorded: bool = False, announce: Callable[[redis.client.Pipeline], None] | None = None
) -> None:
    """Call inside the transaction that ends ``run``: records usage now; on commit, in one round trip to Redis, takes
    the run out of the scheduler (its refund credited when it was dispatched), settles its token-bucket reservation,
    counts its end, and sends what ``announce`` queues on the same pipeline (``runs.lifecycle``: the terminal stream
    event), where those were five or six round trips. A Redis failure is logged, not raised: the end is in Postgres,
    a reservation expires on its own, and the SSE endpoint rebuilds a terminal event the stream lacks.
    ``usage_recorded``: the statement that ended the run recorded its usage too (``runs.lifecycle``'s one-statement
    end, with ``accounts.limits.usage_record_sql``)."""
    if not RunStatus(run.status).is_terminal:
        raise ValueError(f"run {run.pk} has not ended ({run.status})")
    if not usage_recorded and (run.input_tokens or run.output_tokens or run.started_at is not None):
        usage_record(user_id=run.user_id, input_tokens=run.input_tokens, output_tokens=run.output_tokens)
    run_id, user_id = run.pk, run.user_id
    started = run.started_at is not None
    # Charged: the new message (reserved - max_tokens) once generation started, plus the output produced.
    used = (max(0, run.reserved_tokens - run.max_tokens) if started else 0) + run.output_tokens

    unused = max(0, run.reserved_tokens - used) if started else 0

    def settle() -> None:
        user = run.user if Run.user.is_cached(run) else User.objects.select_related("tier").get(pk=user_id)
        limits = user_limits(user=user)
        pipe = get_redis().pipeline(transaction=False)
        # Dispatched, it was charged in full to the fair-share counter: the unused part goes back.
        refund = Refund(tier=limits.tier, user_id=user_id, amount=unused / max(limits.share_weight, 1e-6))
        get_scheduler_store().remove_in(pipe, run_id, refund=refund)
        get_token_buckets().settle_in(
            pipe,
            user_id=user_id,
            tier=limits.tier,
            member=run_member(run_id),
            used_tokens=used,
            limits=bucket_limits(limits),
        )
        record_run_end_in(pipe, run=run, tier=limits.tier)
        if announce is not None:
            announce(pipe)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError:
            logger.exception("run %s ended; its refund, counters and stream's end were not written to Redis", run_id)
            return
        for reply in replies:
            if isinstance(reply, redis.RedisError):
                logger.error("run %s ended; Redis refused a command of its settlement: %s", run_id, reply)

    transaction.on_commit(settle)
