"""Every model registered in the admin has a working changelist, filters, search and change page."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.db.models import Model
from django.test import Client, RequestFactory
from django.urls import reverse
from rest_framework.authtoken.models import Token

from accounts.models import Tier, User
from runs.models import FinishReason, RunStatus
from tests.factories import ChatFactory, MessageFactory, RunFactory, UserFactory

pytestmark = pytest.mark.django_db

REGISTERED: list[type[Model]] = sorted(admin.site._registry, key=lambda m: m._meta.label)


@pytest.fixture
def admin_client_with_rows() -> Client:
    superuser = User.objects.create_superuser("root", "root@example.com", "pw")
    for tier in ("free", "pro"):
        owner = UserFactory.with_tier(tier)
        Token.objects.create(user=owner)
        chat = ChatFactory.create(owner=owner)
        answer = MessageFactory.create(chat=chat, role="assistant", content="an answer " * 20)
        RunFactory.create(chat=chat, status=RunStatus.DONE, finish_reason=FinishReason.STOP, assistant_message=answer)
        RunFactory.create(chat=ChatFactory.create(owner=owner), status=RunStatus.QUEUED)
    client = Client()
    client.force_login(superuser)
    return client


def _url(model: type[Model], view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def test_the_project_models_are_registered() -> None:
    labels = {m._meta.label for m in REGISTERED}
    assert {"accounts.User", "accounts.Tier", "chats.Chat", "chats.Message", "runs.Run"} <= labels


@pytest.mark.parametrize("model", REGISTERED, ids=lambda m: m._meta.label)
def test_changelist_loads(admin_client_with_rows: Client, model: type[Model]) -> None:
    resp = admin_client_with_rows.get(_url(model, "changelist"))
    assert resp.status_code == 200
    model_admin = admin.site._registry[model]
    if model_admin.search_fields:
        assert admin_client_with_rows.get(_url(model, "changelist"), {"q": "a"}).status_code == 200


@pytest.mark.parametrize("model", REGISTERED, ids=lambda m: m._meta.label)
def test_change_and_add_pages_load(admin_client_with_rows: Client, model: type[Model]) -> None:
    obj = model._default_manager.order_by("pk").last()
    if obj is not None:
        assert admin_client_with_rows.get(_url(model, "change", obj.pk)).status_code == 200
    request = RequestFactory().get("/")
    request.user = User.objects.get(username="root")
    if admin.site._registry[model].has_add_permission(request):
        assert admin_client_with_rows.get(_url(model, "add")).status_code == 200


def test_project_changelists_list_their_rows(admin_client_with_rows: Client) -> None:
    for label, expected in [("chats.Chat", 4), ("runs.Run", 4), ("accounts.Tier", 4)]:
        model = next(m for m in REGISTERED if m._meta.label == label)
        resp = admin_client_with_rows.get(_url(model, "changelist"))
        assert resp.context["cl"].result_count == expected, label


def test_list_filters_work(admin_client_with_rows: Client) -> None:
    pro = str(Tier.objects.get(name="pro").pk)
    cases = [
        ("runs.Run", {"status__exact": "queued"}, 2),
        ("runs.Run", {"tier__id__exact": pro}, 2),
        ("chats.Message", {"role__exact": "assistant"}, 2),
        ("accounts.User", {"tier__id__exact": pro}, 1),
        ("chats.Chat", {"owner__tier__id__exact": pro}, 2),
    ]
    for label, params, expected in cases:
        model = next(m for m in REGISTERED if m._meta.label == label)
        resp = admin_client_with_rows.get(_url(model, "changelist"), params)
        assert resp.status_code == 200
        assert resp.context["cl"].result_count == expected, (label, params)


def test_tier_limits_are_editable_from_the_changelist(admin_client_with_rows: Client) -> None:
    tiers = list(Tier.objects.order_by("priority"))
    data: dict[str, str] = {
        "form-TOTAL_FORMS": str(len(tiers)),
        "form-INITIAL_FORMS": str(len(tiers)),
        "_save": "Save",
    }
    for i, tier in enumerate(tiers):
        data[f"form-{i}-id"] = str(tier.pk)
        for field in admin.site._registry[Tier].list_editable:
            data[f"form-{i}-{field}"] = str(getattr(tier, field))
    free_index = next(i for i, t in enumerate(tiers) if t.name == "free")
    data[f"form-{free_index}-max_concurrent_runs"] = "5"

    resp = admin_client_with_rows.post(_url(Tier, "changelist"), data)

    assert resp.status_code == 302, resp.content[:2000]
    assert Tier.objects.get(name="free").max_concurrent_runs == 5


def test_a_runs_change_page_shows_the_sampling_it_was_asked_for(admin_client_with_rows: Client) -> None:
    run = RunFactory.create(
        sampling={"seed": 7, "stop": ["END"], "structured_outputs": {"json": {"type": "object"}}}, end_user="cust-9"
    )
    page = admin_client_with_rows.get(reverse("admin:runs_run_change", args=[run.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "What was asked" in html and "&quot;seed&quot;: 7" in html and "cust-9" in html
