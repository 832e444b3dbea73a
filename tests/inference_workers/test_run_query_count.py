"""A run on the worker pins its database round trips (issue 14: database writes per run).

Counted as in ``tests/runs/test_post_query_count.py``: every statement sent to Postgres, ``BEGIN``/``COMMIT``
and savepoints included, with the work after commit (the settlement, the summary check) run at once. Per run:
the claim (2: the run with its tier, chat, user message, user and their tier and limits, then the update that
claims it while it is still queued and unstarted; a redelivered or recovered run takes the locking read, 4), the
chat's earlier turns for the prompt (1), the first token's time (1), and the end (1: the run ended while it is still
this attempt's, with its assistant message, the chat and the day's usage in the same statement; the settlement uses
the user and limits the claim read). A chat of the browser UI adds the summary check (2: the chat as it is now, and
its unsummarized messages); an OpenAI-compatible call's chat has none. The tier's moderation policy (the
output pass's) and the deployments (the run's deployment key, for the summary check) are per-process snapshots,
warm here as in a serving worker.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pytest_django.fixtures import DjangoAssertNumQueries

from accounts.models import UsageDay
from chats.models import ChatOrigin
from deployments.selection import default_deployment, forget_cached
from inference_workers.runtime import WorkerRuntime
from inference_workers.services import generate_run
from moderation.selectors import forget_cached_policies, moderation_policy
from runs.models import RunStatus
from tests.factories import ChatFactory, RunFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(("origin", "expected"), [(ChatOrigin.API, 5), (ChatOrigin.WEB, 7)])
def test_a_generated_run_costs_a_fixed_number_of_round_trips(
    sim_runtime: WorkerRuntime,
    django_assert_num_queries: DjangoAssertNumQueries,
    origin: ChatOrigin,
    expected: int,
    settings: Any,
) -> None:
    settings.MODERATION = dataclasses.replace(settings.MODERATION, policy_cache_s=600.0)
    settings.DEPLOYMENTS = dataclasses.replace(settings.DEPLOYMENTS, cache_s=600.0)
    forget_cached_policies()
    forget_cached()
    chat = ChatFactory.create(origin=origin)
    moderation_policy(tier=chat.owner.tier)
    deployment = default_deployment()  # the snapshot, warm
    assert deployment is not None
    first = RunFactory.create(chat=chat, max_tokens=8, deployment_id=deployment.id)
    with django_assert_num_queries(expected):  # the day's first run creates its usage row: the same count
        assert generate_run(run_id=first.pk, runtime=sim_runtime) == RunStatus.DONE
    second = RunFactory.create(chat=chat, max_tokens=8, deployment_id=deployment.id)
    with django_assert_num_queries(expected):
        assert generate_run(run_id=second.pk, runtime=sim_runtime) == RunStatus.DONE

    usage = UsageDay.objects.get(user=chat.owner)
    first.refresh_from_db()
    second.refresh_from_db()
    assert usage.runs == 2
    assert usage.input_tokens == first.input_tokens + second.input_tokens > 0
    assert usage.output_tokens == first.output_tokens + second.output_tokens == 16


def test_a_generating_run_holds_no_database_connection(sim_runtime: WorkerRuntime, monkeypatch: Any) -> None:
    """A worker has a task thread per engine slot (256 on a GPU), more than its connection pool holds: a thread keeps
    no connection while its run streams, or the next runs' claims wait for one (seen in bench/serving_ceiling.py at
    128 streams: claims failing after the pool's 10 s timeout)."""
    from django.db import connection

    from runs.streaming.contract import RunStreamWriter, StreamEvent

    held: list[bool] = []
    append = RunStreamWriter.append_later

    def recording(self: RunStreamWriter, event: StreamEvent, data: Any, *args: Any, **kwargs: Any) -> Any:
        if event == StreamEvent.DELTA:
            held.append(connection.connection is not None)
        return append(self, event, data, *args, **kwargs)

    monkeypatch.setattr(RunStreamWriter, "append_later", recording)
    run = RunFactory.create(max_tokens=12)
    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE
    assert held and not any(held), held
    run.refresh_from_db()
    assert run.first_token_at is not None and run.output_tokens == 12
