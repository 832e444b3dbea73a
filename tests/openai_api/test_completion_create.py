"""What ``/v1/chat/completions`` writes for a call: a chat of its own per choice holding the call's messages, each
choice's run queued; a call of one choice and one message in one statement."""

from __future__ import annotations

import logging

import pytest
from pytest_django.fixtures import DjangoAssertNumQueries

from accounts.models import User, UserLimitOverride
from chats.models import Chat, ChatOrigin, Message, MessageRole
from core.errors import TooManyRequestsError
from deployments.selection import Served, default_deployment
from deployments.tokenizer import using_model
from openai_api.requests import parse_chat_completion
from openai_api.services import chat_completion_create
from runs.models import Run, RunStatus
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def api_user() -> User:
    """A user as the API's token authentication loads one: with their tier and limit override."""
    return User.objects.select_related("tier", "limit_override").get(pk=UserFactory.create().pk)


@pytest.fixture
def served() -> Served:
    found = default_deployment()
    assert found is not None
    return found


def create(user: User, served: Served, messages: list[dict[str, str]], **body: object) -> list[Run]:
    with using_model(served.local_path):
        request = parse_chat_completion({"model": served.name, "messages": messages, "max_tokens": 16, **body})
        return chat_completion_create(user=user, request=request, deployment=served)


def test_one_message_one_choice_is_one_statement_with_its_chat_message_and_queued_run(
    served: Served, django_assert_num_queries: DjangoAssertNumQueries, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runs.events")
    user = api_user()
    create(user, served, [{"role": "user", "content": "warm the tokenizer"}])
    with django_assert_num_queries(1):  # no BEGIN, no COMMIT: one statement is atomic on its own
        (run,) = create(user, served, [{"role": "user", "content": "What is a \x00 byte?"}])
    stored = Run.objects.select_related("chat", "user_message").get(pk=run.pk)
    assert (stored.status, stored.user_id, stored.max_tokens) == (RunStatus.QUEUED, user.pk, 16)
    chat = stored.chat
    assert (chat.pk, chat.owner_id, chat.origin) == (run.chat_id, user.pk, ChatOrigin.API)
    assert chat.title.startswith("What is a")
    assert stored.user_message is not None and stored.user_message.pk == run.user_message_id
    assert (stored.user_message.chat_id, stored.user_message.content) == (chat.pk, "What is a \x00 byte?")
    assert list(Message.objects.filter(chat=chat)) == [stored.user_message]
    # Handed on after the statement: admitted, then queued for the dispatcher (which other tests' stacks may run).
    steps = [r.getMessage() for r in caplog.records if r.name == "runs.events" and f"run {run.pk} " in r.getMessage()]
    assert [step.split(":")[0].split(" for ")[0] for step in steps] == [
        f"run {run.pk} admitted",
        f"run {run.pk} queued",
    ]


def test_earlier_turns_are_written_before_the_prompt_in_the_same_chat(served: Served) -> None:
    user = UserFactory.create()
    (run,) = create(
        user,
        served,
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "Bye"},
        ],
    )
    messages = list(Message.objects.filter(chat_id=run.chat_id).order_by("id"))
    assert [(m.role, m.content) for m in messages] == [
        (MessageRole.SYSTEM, "Be brief."),
        (MessageRole.USER, "Hi"),
        (MessageRole.ASSISTANT, "Hello"),
        (MessageRole.USER, "Bye"),
    ]
    assert messages[-1].pk == run.user_message_id


def test_each_choice_has_a_chat_of_its_own(served: Served) -> None:
    user = UserFactory.create()
    runs = create(user, served, [{"role": "user", "content": "Two answers"}], n=2)
    assert len({run.chat_id for run in runs}) == 2
    assert Chat.objects.filter(owner=user, origin=ChatOrigin.API).count() == 2


def test_a_call_refused_by_admission_writes_nothing(served: Served) -> None:
    user = UserFactory.create()
    UserLimitOverride.objects.create(user=user, bucket_capacity_tokens=30, bucket_refill_per_s=0.001)
    create(user, served, [{"role": "user", "content": "Within my budget"}])
    chats, runs, messages = Chat.objects.count(), Run.objects.count(), Message.objects.count()
    with pytest.raises(TooManyRequestsError):
        create(user, served, [{"role": "user", "content": "Past my budget"}])
    assert (Chat.objects.count(), Run.objects.count(), Message.objects.count()) == (chats, runs, messages)
