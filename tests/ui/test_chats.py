"""Browser tests of what surrounds the conversation: search across one's chats, the chat's settings (system prompt,
temperature), its export, and the usage page (tokens per day, the bucket, the tier, the last refusals)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from accounts.models import UserLimitOverride
from chats.models import Chat, MessageRole
from tests.factories import ChatFactory, MessageFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]


def _chat(user, title: str, *texts: str) -> Chat:  # type: ignore[no-untyped-def]
    chat = ChatFactory.create(owner=user, title=title)
    for i, text in enumerate(texts):
        MessageFactory.create(chat=chat, role=MessageRole.USER if i % 2 == 0 else MessageRole.ASSISTANT, content=text)
    return chat


def test_search_finds_ones_own_chats_and_opens_a_hit(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    bread = _chat(user, "Baking", "How do I bake sourdough bread?", "Feed the starter, then knead the dough.")
    _chat(user, "Travel", "Where should I go in spring?", "Kyoto, for the blossoms.")
    _chat(UserFactory.create(), "Someone else's sourdough", "sourdough secrets")
    login(user)
    page.goto("/")
    search = page.get_by_role("searchbox", name="Search your chats")
    search.fill("sourdough")
    hits = page.locator("#search-results .search-hit")
    expect(hits).to_have_count(1)
    expect(hits.first.locator(".search-title")).to_have_text("Baking")
    expect(hits.first.locator(".search-snippet")).to_contain_text(re.compile("sourdough", re.I))
    expect(page.locator("#chat-list-scroll")).to_be_hidden()
    expect(page.locator("#search-status")).to_have_text("1 chat found")
    screenshot(page, "search")
    hits.first.locator("a").click()
    expect(page).to_have_url(re.compile(rf"/c/{bread.pk}$"))
    expect(page.locator("#chat-title")).to_have_text("Baking")

    # Typed while the chat is still opening: the chat's load must not pull the caret into the prompt box.
    search.fill("no such words anywhere")
    expect(page.locator("#search-status")).to_have_text("No chats found.")
    expect(page.locator("#prompt")).to_have_value("")
    search.press("Escape")
    expect(search).to_have_value("")
    expect(page.locator("#chat-list-scroll")).to_be_visible()
    expect(page.locator("#chat-list .chat-link")).to_have_count(2)


def test_chat_settings_save_the_system_prompt_and_temperature(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    chat = _chat(user, "Tuned", "hello", "hi")
    login(user)
    page.goto(f"/c/{chat.pk}")
    page.get_by_role("button", name="Chat settings").click()
    dialog = page.get_by_role("dialog", name="Chat settings")
    expect(dialog.get_by_label("System prompt")).to_be_focused()
    dialog.get_by_label("System prompt").fill("You are a pirate. Answer in one line.")
    dialog.get_by_label("Temperature").fill("3")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog.get_by_role("alert")).to_contain_text("from 0 to 2")
    dialog.get_by_label("Temperature").fill("0.3")
    screenshot(page, "settings")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    chat.refresh_from_db()
    assert chat.system_prompt == "You are a pirate. Answer in one line."
    assert chat.temperature == pytest.approx(0.3)

    page.reload()
    page.get_by_role("button", name="Chat settings").click()
    expect(dialog.get_by_label("System prompt")).to_have_value("You are a pirate. Answer in one line.")
    expect(dialog.get_by_label("Temperature")).to_have_value("0.3")
    dialog.get_by_label("System prompt").fill("")
    dialog.get_by_label("Temperature").fill("")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    chat.refresh_from_db()
    assert chat.system_prompt == "" and chat.temperature is None


def test_export_links_download_markdown_and_json(page: Page, login) -> None:
    user = UserFactory.create()
    chat = _chat(user, "Export me", "What is 2 + 2?", "**4**")
    login(user)
    page.goto(f"/c/{chat.pk}")
    with page.expect_download() as markdown_download:
        page.get_by_role("link", name="Export Markdown").click()
    markdown = markdown_download.value
    assert markdown.suggested_filename.endswith(".md")
    text = Path(markdown.path()).read_text(encoding="utf-8")
    assert "What is 2 + 2?" in text and "**4**" in text
    with page.expect_download() as json_download:
        page.get_by_role("link", name="Export JSON").click()
    exported = json.loads(Path(json_download.value.path()).read_text(encoding="utf-8"))
    assert [m["content"] for m in exported["messages"]] == ["What is 2 + 2?", "**4**"]


@pytest.mark.usefixtures("needs_worker")
def test_usage_page_shows_the_day_the_bucket_the_tier_and_a_refusal(page: Page, login, api_for, screenshot) -> None:
    user = UserFactory.create()
    UserLimitOverride.objects.create(user=user, bucket_capacity_tokens=300, bucket_refill_per_s=1)
    first = ChatFactory.create(owner=user, title="first")
    second = ChatFactory.create(owner=user, title="second")
    client = api_for(user)
    assert client.post(f"/api/chats/{first.pk}/messages", {"content": "hi"}, format="json").status_code == 202
    refused = client.post(f"/api/chats/{second.pk}/messages", {"content": "and me"}, format="json")
    assert refused.status_code == 429
    login(user)
    page.goto("/")
    page.get_by_role("link", name="Usage").click()
    expect(page).to_have_url(re.compile("/usage/$"))
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#tier-limits")).to_contain_text(user.tier.name)
    bucket = page.locator("#buckets .bucket").first
    expect(bucket.locator("meter")).to_have_attribute("max", "300")
    expect(bucket).to_contain_text("of 300 tokens left")
    expect(bucket).to_contain_text("refills 1 per second")
    expect(page.locator("#daily tbody tr").first).to_be_visible()
    rejection = page.locator("#rejections tbody tr").first
    expect(rejection).to_contain_text("429")
    expect(rejection).to_contain_text(re.compile("budget", re.I))
    screenshot(page, "usage")
