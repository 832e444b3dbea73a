"""Moderation in the admin: policies per tier, violations with their filters, each user's count and list."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse

from accounts.models import User
from moderation.models import ModerationPolicy
from moderation.services import moderate_input, violation_record
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def _violate(user: User, times: int, direction: str = "input") -> None:
    verdict = moderate_input(user=user, tier=user.tier, text="You are a fucking idiot.")
    for _ in range(times):
        violation_record(user=user, tier=user.tier, direction=direction, verdict=verdict, message_id=None)


def test_the_user_list_counts_violations_and_the_user_page_lists_them(staff: Client) -> None:
    offender, clean = UserFactory.create(username="offender"), UserFactory.create(username="clean")
    _violate(offender, 3)
    page = staff.get(reverse("admin:accounts_user_changelist") + "?o=-7")  # sorted by the violations column
    assert page.status_code == 200
    rows = page.context["cl"].result_list
    assert [(u.username, u.violation_total) for u in rows][:2] == [("offender", 3), ("clean", 0)]
    detail = staff.get(reverse("admin:accounts_user_change", args=[offender.pk]))
    assert detail.status_code == 200 and b"Moderation violations" in detail.content
    assert detail.content.count(b"harassment") >= 3
    assert clean.pk  # listed with 0


def test_the_violation_list_filters_by_direction_and_tier(staff: Client) -> None:
    free, pro = UserFactory.with_tier("free"), UserFactory.with_tier("pro")
    _violate(free, 2)
    _violate(pro, 1, direction="output")
    url = reverse("admin:moderation_violation_changelist")
    assert staff.get(url).context["cl"].result_count == 3
    assert staff.get(url + "?direction__exact=output").context["cl"].result_count == 1
    assert staff.get(url + "?tier_name=free").context["cl"].result_count == 2
    page = staff.get(url)
    assert b"harassment 1.00" in page.content  # the top score column
    assert staff.get(reverse("admin:moderation_violation_add")).status_code == 403  # written by the passes only


def test_policies_are_listed_per_tier_and_edited(staff: Client) -> None:
    # The migration's rows (a transactional test before this one may have flushed them).
    importlib.import_module("moderation.migrations.0002_policy_per_tier").create_policies(apps, None)
    url = reverse("admin:moderation_moderationpolicy_changelist")
    assert staff.get(url).status_code == 200
    policy = ModerationPolicy.objects.select_related("tier").get(tier__name="free")
    change = reverse("admin:moderation_moderationpolicy_change", args=[policy.pk])
    form = {
        "tier": policy.tier.pk, "input_enabled": "on", "output_mode": "holdback", "holdback_tokens": 8,
        "backend": "local", "threshold": 0.8, "allow_list": "breast cancer", "violations_before_suspension": 3,
        "violation_window_hours": 12, "suspension_minutes": 60,
    }  # fmt: skip
    assert staff.post(change, form).status_code == 302
    policy.refresh_from_db()
    assert (policy.output_mode, policy.holdback_tokens, policy.threshold) == ("holdback", 8, 0.8)
    form["threshold"] = 1.5
    assert staff.post(change, form).status_code == 200  # the form again, with the error
