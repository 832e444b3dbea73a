// The conversation pane: which chat it shows, that chat's history (paged backwards by cursor as the
// reader scrolls up), the message bubbles, and keeping the view pinned to the bottom.

import { api } from "./api.js";
import { isVisibleIn } from "./dom.js";
import { Moderation } from "./constants.js";
import { renderMarkdown } from "./markdown.js";

const MESSAGE_PAGE = 30;

/** One message bubble: role, body (Markdown for the assistant, plain text otherwise) and a meta line. */
export function buildMessage(message) {
  const li = document.createElement("li");
  li.className = `message message-${message.role}`;
  li.dataset.role = message.role;
  if (message.id) li.dataset.messageId = String(message.id);
  const who = document.createElement("div");
  who.className = "message-role";
  who.textContent = message.role === "user" ? "You" : message.role === "assistant" ? "Assistant" : "System";
  const body = document.createElement("div");
  body.className = "message-body";
  if (message.role === "assistant") {
    body.classList.add("markdown");
    renderMarkdown(body, message.content || "");
  } else {
    body.textContent = message.content || "";
  }
  const meta = document.createElement("div");
  meta.className = "message-meta";
  if (message.moderation) markModerated(li, message.moderation);
  li.append(who, body, meta);
  return li;
}

/** Marks a bubble refused (a flagged prompt, never answered) or retracted (a flagged answer, its text withdrawn). */
export function markModerated(li, moderation) {
  li.classList.add(`message-${moderation}`);
  li.dataset.moderation = moderation;
  const note = document.createElement("div");
  note.className = "message-moderation";
  note.textContent =
    moderation === Moderation.REFUSED
      ? "Refused by moderation: this prompt was not answered."
      : "Retracted by moderation: this answer was withdrawn.";
  li.append(note);
}

export class MessageList {
  constructor({ messages, messagesSentinel, messagesStatus, messageList, emptyState }) {
    this.box = messages; // the scrolling container
    this.sentinel = messagesSentinel;
    this.status = messagesStatus;
    this.list = messageList;
    this.emptyState = emptyState;
    this.chatId = null; // the chat shown; null for a new chat not created yet
    this.cursor = null;
    this.done = true;
    this.loading = false;
    this.token = 0; // bumped by open(): answers for a chat no longer shown are dropped
    this.actions = null; // the AnswerActions that stored answers get (set by the app)
  }

  /** A bubble for `message`, with the answer's actions when it is a stored answer. */
  build(message) {
    const li = buildMessage(message);
    if (message.role === "assistant" && message.id && this.actions) this.actions.attach(li, message);
    return li;
  }

  /** The newest stored message, read again, replaces `bubble` (a finished run's: it gains its actions and
   * versions). Resolves to the new bubble, or null when the newest message is not an answer. */
  async replaceWithStored(bubble) {
    const { chatId, token } = this;
    let page;
    try {
      page = await api("GET", `/api/chats/${chatId}/messages?limit=1`);
    } catch {
      return null;
    }
    const newest = page.results[0];
    if (token !== this.token || !newest || newest.role !== "assistant" || !bubble.isConnected) return null;
    const li = this.build(newest);
    if (bubble.dataset.status) li.dataset.status = bubble.dataset.status;
    if (!li.dataset.runId && bubble.dataset.runId) li.dataset.runId = bubble.dataset.runId;
    li.querySelector(".message-body").setAttribute("aria-busy", "false");
    li.className = bubble.className;
    li.querySelector(".message-meta").textContent = bubble.querySelector(".message-meta").textContent;
    const hadFocus = bubble.contains(document.activeElement);
    bubble.replaceWith(li);
    if (hadFocus) li.querySelector(".answer-bar button:not([hidden])")?.focus();
    this.actions?.refreshLast();
    return li;
  }

  /** Loads older messages whenever the top of the history scrolls into view. */
  observe() {
    new IntersectionObserver((entries) => {
      if (entries.some((entry) => entry.isIntersecting) && this.chatId && this.list.childElementCount) {
        this.maybeLoadOlder();
      }
    }, { root: this.box, rootMargin: "200px" }).observe(this.sentinel);
  }

  /** Empties the pane for `chatId` (null: a new chat). Returns a token for `isCurrent`. */
  open(chatId) {
    const token = ++this.token;
    this.chatId = chatId;
    this.cursor = null;
    this.done = !chatId;
    this.loading = false;
    this.list.replaceChildren();
    this.status.textContent = "";
    this.updateEmptyState();
    return token;
  }

  /** Whether the pane still shows what `open()` returned `token` for. */
  isCurrent(token) {
    return token === this.token;
  }

  /** The first prompt of a new chat created it: the pane now belongs to it (it has no older history). */
  adopt(chatId) {
    this.chatId = chatId;
    this.done = true;
  }

  /** The chat shown does not exist: a prompt now starts a new one. */
  forget() {
    this.chatId = null;
  }

  nearBottom() {
    const box = this.box;
    return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  }

  scrollToBottom() {
    this.box.scrollTop = this.box.scrollHeight;
  }

  updateEmptyState() {
    this.emptyState.hidden = this.list.childElementCount > 0 || this.loading;
  }

  /** Appends a bubble (staying at the bottom if the reader was there, or for their own prompt). */
  append(message) {
    const stick = this.nearBottom();
    const li = this.build(message);
    this.list.append(li);
    this.updateEmptyState();
    this.actions?.refreshLast();
    if (stick || message.role === "user") this.scrollToBottom();
    return li;
  }

  /** Loads the next page of older messages; resolves to the page, or null (nothing to load, an error, or
   * another chat opened meanwhile). */
  async loadOlder() {
    if (this.loading || this.done || !this.chatId) return null;
    const { chatId, token } = this;
    this.loading = true;
    this.status.textContent = this.list.childElementCount ? "Loading earlier messages…" : "Loading…";
    let page;
    const query = new URLSearchParams({ limit: String(MESSAGE_PAGE) });
    if (this.cursor) query.set("cursor", this.cursor);
    try {
      page = await api("GET", `/api/chats/${chatId}/messages?${query}`);
    } catch (error) {
      if (token === this.token) this.status.textContent = `Could not load messages: ${error.message}`;
      this.loading = false;
      return null;
    }
    this.loading = false;
    if (token !== this.token) return null;
    // Prepend older messages without moving what the reader is looking at.
    const box = this.box;
    const fromBottom = box.scrollHeight - box.scrollTop;
    // A page read before a prompt was sent can be answered after it was stored: its bubble is already shown.
    const shown = new Set(Array.from(this.list.children, (li) => li.dataset.messageId).filter(Boolean));
    const nodes = page.results.slice().reverse()
      .filter((message) => !shown.has(String(message.id)))
      .map((message) => this.build(message));
    this.list.prepend(...nodes);
    this.actions?.refreshLast();
    box.scrollTop = box.scrollHeight - fromBottom;
    this.cursor = page.next_cursor;
    this.done = !page.next_cursor;
    const pagedBack = Boolean(query.get("cursor"));
    this.status.textContent = this.done && pagedBack ? "Start of the conversation" : "";
    this.updateEmptyState();
    return page;
  }

  /** Keeps loading older pages while the top of the history is on screen. */
  maybeLoadOlder() {
    if (!this.done && !this.loading && isVisibleIn(this.sentinel, this.box)) {
      this.loadOlder().then((page) => {
        if (page) this.maybeLoadOlder();
      });
    }
  }
}
