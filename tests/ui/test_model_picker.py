"""The model picker above the prompt box, against the real stack: it lists the ready models of ``GET /api/models``
and a new chat is created with the one picked (then shows it again when the chat is reopened)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from chats.models import Chat
from deployments.models import DeploymentStatus, ModelDeployment
from runs.models import Run
from tests.deployment_helpers import add_version
from tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("needs_worker")]


def test_the_picker_lists_the_ready_models_and_a_new_chat_keeps_the_pinned_version(
    page: Page, login, screenshot
) -> None:
    v1 = ModelDeployment.objects.get(is_default=True)
    # Weight 0: unpinned runs stay on v1, the version the stack's worker serves.
    add_version("v2", weight=0)
    add_version("v1", name="retired-model", status=DeploymentStatus.RETIRED)
    user = UserFactory.create()
    login(user)
    page.goto("/")

    picker = page.get_by_role("combobox", name="Model")
    options = picker.locator("option")
    expect(options).to_have_count(4)
    assert [options.nth(i).get_attribute("value") for i in range(4)] == [v1.name, f"{v1.name}@v2", v1.key, "auto"]
    expect(options.first).to_have_text(f"{v1.name} (default)")
    expect(picker).to_have_value(v1.name)
    expect(picker).to_be_enabled()
    screenshot(page, "picker")

    picker.select_option(v1.key)
    prompt = page.get_by_role("textbox", name="Message")
    prompt.fill("Which model answers?")
    prompt.press("Enter")
    expect(page).to_have_url(re.compile(r"/c/\d+$"))
    bubble = page.locator("#message-list .message-assistant[data-run-id]").last
    expect(bubble).to_have_attribute("data-status", "done", timeout=40_000)

    chat = Chat.objects.get(owner=user)
    assert chat.model == v1.key
    run = Run.objects.select_related("deployment").get(chat=chat)
    assert run.deployment is not None and run.deployment.key == v1.key
    page.reload()
    expect(page.get_by_role("combobox", name="Model")).to_have_value(v1.key)
