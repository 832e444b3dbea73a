"""Browser tests of memory across chats: the sidebar's "Memory" dialog (``web/static/web/memory.js``) on the real
``/api/memory`` and ``/api/memories``. The switch and that it persists, one's own memories only, search, paging,
delete, "Forget everything", a tier without memory, and adding a memory with and without an embedding worker.

The live stack's web process is a separate process: what it caches (deployments, ready workers, memory policies) is
at most ``DEPLOYMENT_CACHE_S`` old there (0.2 s, ``tests.live_stack._stack_env``), so a test that changes one of
those waits that out before the page asks."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import redis
from django.conf import settings
from playwright.sync_api import Locator, Page, expect

from accounts.models import User
from chats.models import Chat
from core.vector_index import pack
from generation.embedding_contract import REPLY_TTL_S, EmbeddingRequest, embedding_queue, reply_json
from memory.models import Memory, MemoryPolicy
from memory.selectors import forget_memory_policies
from tests.deployment_helpers import mark_ready_worker
from tests.embeddings.helpers import ensure_embedding_deployment
from tests.factories import ChatFactory, UserFactory
from tests.live_stack import _stack_env

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]

SWITCH = "Remember what I say across chats"
DIMENSIONS = 384


def _memory(user: User, content: str, chat: Chat | None = None) -> Memory:
    return Memory.objects.create(
        user=user,
        chat=chat,
        content=content,
        embedding=pack(np.ones(DIMENSIONS, dtype=np.float32)),
        embedding_model="all-MiniLM-L6-v2@test",
    )


def _wait_out_the_stacks_cache() -> None:
    """Rows the web process caches (a memory policy, a deployment, a ready worker) are seen there after this."""
    time.sleep(float(_stack_env({})["DEPLOYMENT_CACHE_S"]) + 0.3)


def _open_memory(page: Page) -> Locator:
    page.get_by_role("button", name="Memory", exact=True).click()
    dialog = page.get_by_role("dialog", name="Memory")
    expect(dialog).to_be_visible()
    return dialog


@contextmanager
def _stand_in_embedder(key: str) -> Iterator[list[int]]:
    """Answers the embedding requests of deployment ``key`` as its worker would (``generation.embedding_contract``:
    the request list, a reply key), every text with the same unit vector, and lists itself ready. The UI's live stack
    runs no embedding worker (``tests.live_stack``), and these tests are about the page, not the model: the web
    process still resolves the deployment, tokenizes with its tokenizer and waits for the reply as it always does.
    Yields the number of texts of each request it answered."""
    client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    answered: list[int] = []
    stop = threading.Event()
    unit = [1.0 / math.sqrt(DIMENSIONS)] * DIMENSIONS

    def serve() -> None:
        while not stop.is_set():
            popped = client.blpop([embedding_queue(key)], timeout=1)
            if popped is None:
                continue
            request = EmbeddingRequest.from_json(str(popped[1]))  # decode_responses: already a str
            client.rpush(request.reply_key, reply_json(vectors=[unit] * len(request.inputs)))
            client.expire(request.reply_key, REPLY_TTL_S)
            answered.append(len(request.inputs))

    thread = threading.Thread(target=serve, name="stand-in embedder", daemon=True)
    thread.start()
    mark_ready_worker(key, worker="stand-in@tests.ui", ttl_s=120)
    try:
        yield answered
    finally:
        stop.set()
        thread.join(timeout=5)
        client.close()


def test_the_dialog_lists_ones_own_memories_and_the_switch_persists(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    trip = ChatFactory.create(owner=user, title="Trip planning")
    _memory(user, "I am vegetarian.")
    _memory(user, "My sister lives in Lisbon.", chat=trip)
    _memory(UserFactory.create(), "Someone else's secret: the vault code is 1234.")
    login(user)
    page.goto("/")
    button = page.get_by_role("button", name="Memory", exact=True)
    dialog = _open_memory(page)
    switch = dialog.get_by_role("switch", name=SWITCH)
    expect(switch).to_be_focused()
    expect(switch).not_to_be_checked()
    expect(switch).to_be_enabled()
    expect(dialog.get_by_role("status")).to_have_text("2 memories")
    items = dialog.get_by_role("list", name="Your memories").get_by_role("listitem")
    expect(items).to_have_count(2)
    expect(items.nth(0)).to_contain_text("My sister lives in Lisbon.")  # newest first
    expect(items.nth(0)).to_contain_text("from Trip planning")
    expect(items.nth(0).get_by_role("link", name="Trip planning")).to_have_attribute("href", f"/c/{trip.pk}")
    expect(items.nth(1)).to_contain_text("I am vegetarian.")
    expect(items.nth(1)).to_contain_text("added by you")
    expect(items.nth(1).get_by_role("link")).to_have_count(0)
    expect(dialog.get_by_role("button", name="Delete memory")).to_have_count(2)
    expect(dialog).not_to_contain_text("vault code")
    expect(dialog.get_by_role("button", name="Load more")).to_be_hidden()
    expect(dialog).to_contain_text("deleting a chat deletes its memories", ignore_case=True)
    assert user.memory_enabled is False

    with page.expect_response(lambda r: r.url.endswith("/api/memory") and r.request.method == "PATCH") as patched:
        switch.press("Space")  # keyboard: the switch is a checkbox
    assert patched.value.status == 200
    expect(switch).to_be_checked()
    user.refresh_from_db()
    assert user.memory_enabled is True
    screenshot(page, "dialog")

    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(button).to_be_focused()

    page.reload()
    dialog = _open_memory(page)
    switch = dialog.get_by_role("switch", name=SWITCH)
    expect(switch).to_be_checked()  # read back from the server
    with page.expect_response(lambda r: r.url.endswith("/api/memory") and r.request.method == "PATCH") as patched:
        switch.click()
    assert patched.value.status == 200
    expect(switch).not_to_be_checked()
    user.refresh_from_db()
    assert user.memory_enabled is False

    # A memory's chat opens in the page (the dialog closes).
    dialog.get_by_role("link", name="Trip planning").click()
    expect(dialog).to_be_hidden()
    expect(page).to_have_url(re.compile(rf"/c/{trip.pk}$"))
    expect(page.locator("#chat-title")).to_have_text("Trip planning")


def test_search_narrows_the_list_paging_follows_the_cursor_and_delete_removes_one(page: Page, login) -> None:
    user = UserFactory.create()
    for i in range(22):
        _memory(user, f"Filler note number {i} about nothing in particular.")
    peanuts = _memory(user, "I am allergic to peanuts.")
    _memory(user, "My sister lives in Lisbon.")
    _memory(user, "I prefer answers in French.")
    stranger = _memory(UserFactory.create(), "I am allergic to peanuts and shellfish.")
    login(user)
    page.goto("/")
    dialog = _open_memory(page)
    status = dialog.get_by_role("status")
    items = dialog.get_by_role("list", name="Your memories").get_by_role("listitem")
    expect(status).to_have_text("25 memories")
    expect(items).to_have_count(20)  # a page
    more = dialog.get_by_role("button", name="Load more")
    more.click()
    expect(items).to_have_count(25)
    expect(more).to_be_hidden()
    expect(items.last).to_contain_text("Filler note number 0 ")

    search = dialog.get_by_role("searchbox", name="Search memories")
    search.fill("peanuts")
    expect(status).to_have_text("1 memory matches")
    expect(items).to_have_count(1)
    expect(items.first).to_have_text(re.compile("I am allergic to peanuts\\."))
    search.fill("no such words anywhere")
    expect(status).to_have_text("No memories match.")
    expect(items).to_have_count(0)
    search.fill("Lisbon OR French")  # web-search syntax
    expect(status).to_have_text("2 memories match")
    expect(items).to_have_count(2)
    search.press("Escape")  # the first Escape clears the search, the dialog stays
    expect(search).to_have_value("")
    expect(dialog).to_be_visible()
    expect(status).to_have_text("25 memories")

    search.fill("peanuts")
    expect(items).to_have_count(1)
    with page.expect_response(lambda r: r.request.method == "DELETE") as deleted:
        items.first.get_by_role("button", name="Delete memory").click()
    assert deleted.value.status == 204
    expect(items).to_have_count(0)
    expect(status).to_have_text("No memories match.")
    assert not Memory.objects.filter(pk=peanuts.pk).exists()
    assert Memory.objects.filter(pk=stranger.pk).exists()
    search.press("Escape")
    expect(status).to_have_text("24 memories")
    page.reload()
    dialog = _open_memory(page)
    expect(dialog.get_by_role("status")).to_have_text("24 memories")
    expect(dialog).not_to_contain_text("peanuts")


def test_forget_everything_asks_first_then_deletes_all_ones_memories(page: Page, login) -> None:
    user = UserFactory.create()
    chat = ChatFactory.create(owner=user, title="Cooking")
    _memory(user, "I cook for four people.", chat=chat)
    _memory(user, "I have a gas stove.")
    stranger = _memory(UserFactory.create(), "Not yours to forget.")
    login(user)
    page.goto("/")
    dialog = _open_memory(page)
    status = dialog.get_by_role("status")
    expect(status).to_have_text("2 memories")
    forget = dialog.get_by_role("button", name="Forget everything")

    with page.expect_event("dialog") as asked:
        forget.click()  # the page fixture dismisses the confirm(): nothing happens
    assert asked.value.type == "confirm" and "Forget all your memories" in asked.value.message
    expect(status).to_have_text("2 memories")
    assert Memory.objects.filter(user=user).count() == 2

    page.accept_dialogs = True  # type: ignore[attr-defined]
    with page.expect_response(lambda r: r.url.endswith("/api/memories") and r.request.method == "DELETE") as cleared:
        forget.click()
    assert cleared.value.json() == {"deleted": 2}
    expect(status).to_have_text("No memories yet.")
    expect(dialog.get_by_role("list", name="Your memories").get_by_role("listitem")).to_have_count(0)
    expect(forget).to_be_disabled()
    assert not Memory.objects.filter(user=user).exists()
    assert Memory.objects.filter(pk=stranger.pk).exists()
    assert Chat.objects.filter(pk=chat.pk).exists(), "forgetting memories keeps the chats"


def test_a_tier_without_memory_shows_the_switch_off_and_disabled(page: Page, login) -> None:
    user = UserFactory.create(memory_enabled=True)  # turned on before the admin switched the tier off
    MemoryPolicy.objects.create(tier=user.tier, enabled=False)
    forget_memory_policies()
    _memory(user, "Still listed, and still deletable.")
    _wait_out_the_stacks_cache()
    login(user)
    page.goto("/")
    dialog = _open_memory(page)
    switch = dialog.get_by_role("switch", name=SWITCH)
    expect(switch).to_be_disabled()
    expect(switch).not_to_be_checked()
    expect(dialog.get_by_text("Memory is switched off for your tier.")).to_be_visible()
    expect(switch).to_have_attribute("aria-describedby", "memory-unavailable")
    expect(dialog.get_by_role("textbox", name="Add a memory")).to_be_disabled()
    expect(dialog.get_by_role("status")).to_have_text("1 memory")
    expect(page.get_by_role("searchbox", name="Search memories")).to_be_focused()  # not a disabled control
    user.refresh_from_db()
    assert user.memory_enabled is True, "the user's own choice is kept for later"

    dialog.get_by_role("button", name="Delete memory").click()
    expect(dialog.get_by_role("status")).to_have_text("No memories yet.")
    assert not Memory.objects.filter(user=user).exists()


def test_adding_a_memory_without_an_embedding_worker_shows_why_and_keeps_the_text(page: Page, login) -> None:
    # The UI's live stack runs no embedding worker: with the memory deployment ready but none of its workers up,
    # POST /api/memories is a 503 (Retry-After), which the dialog shows; the typed text stays for a retry.
    ensure_embedding_deployment()
    user = UserFactory.create()
    _wait_out_the_stacks_cache()
    login(user)
    page.goto("/")
    dialog = _open_memory(page)
    expect(dialog.get_by_role("status")).to_have_text("No memories yet.")
    box = dialog.get_by_role("textbox", name="Add a memory")
    box.fill("My favourite colour is green.")
    with page.expect_response(lambda r: r.url.endswith("/api/memories") and r.request.method == "POST") as added:
        dialog.get_by_role("button", name="Add", exact=True).click()
    assert added.value.status == 503
    expect(dialog.get_by_role("alert")).to_contain_text("Could not add the memory")
    expect(dialog.get_by_role("alert")).to_contain_text("no ready worker")
    expect(box).to_have_value("My favourite colour is green.")
    expect(box).to_be_focused()
    expect(dialog.get_by_role("status")).to_have_text("No memories yet.")
    assert not Memory.objects.filter(user=user).exists()

    box.fill("   ")  # nothing to remember: said in the page, nothing sent
    dialog.get_by_role("button", name="Add", exact=True).click()
    expect(dialog.get_by_role("alert")).to_have_text("Write something to remember first.")


def test_an_added_memory_appears_first_in_the_list(page: Page, login) -> None:
    deployment = ensure_embedding_deployment()
    user = UserFactory.create()
    _memory(user, "I am vegetarian.")
    with _stand_in_embedder(deployment.key) as answered:
        _wait_out_the_stacks_cache()
        login(user)
        page.goto("/")
        dialog = _open_memory(page)
        status = dialog.get_by_role("status")
        expect(status).to_have_text("1 memory")
        box = dialog.get_by_role("textbox", name="Add a memory")
        box.fill("I live in Porto and work as a nurse.")
        box.press("Enter")
        items = dialog.get_by_role("list", name="Your memories").get_by_role("listitem")
        expect(items).to_have_count(2)
        expect(items.first).to_contain_text("I live in Porto and work as a nurse.")
        expect(items.first).to_contain_text("added by you")
        expect(status).to_have_text("2 memories")
        expect(box).to_have_value("")
        expect(dialog.get_by_role("alert")).to_have_text("")
    assert answered == [1]
    added = Memory.objects.get(user=user, content="I live in Porto and work as a nurse.")
    assert added.chat is None and added.embedding_model == deployment.key
