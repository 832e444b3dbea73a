// The chat page: sidebar of chats, message history, prompt box and the streaming answer.
// Plain ES module, no build step. All text from users and the model goes through text nodes
// (markdown.js builds elements; nothing here assigns innerHTML).

import { api } from "./api.js";
import { renderMarkdown } from "./markdown.js";
import { RunStream } from "./stream.js";

const $ = (id) => document.getElementById(id);
const ui = {
  sidebar: $("sidebar"),
  sidebarToggle: $("sidebar-toggle"),
  sidebarBackdrop: $("sidebar-backdrop"),
  newChat: $("new-chat"),
  chatList: $("chat-list"),
  chatListScroll: $("chat-list-scroll"),
  chatListSentinel: $("chat-list-sentinel"),
  chatListStatus: $("chat-list-status"),
  chatTitle: $("chat-title"),
  messages: $("messages"),
  messagesSentinel: $("messages-sentinel"),
  messagesStatus: $("messages-status"),
  messageList: $("message-list"),
  emptyState: $("empty-state"),
  runStatus: $("run-status"),
  alert: $("alert"),
  alertText: $("alert-text"),
  alertRetry: $("alert-retry"),
  alertClose: $("alert-close"),
  composer: $("composer"),
  prompt: $("prompt"),
  send: $("send"),
  stop: $("stop"),
  accountTier: $("account-tier"),
  accountBudget: $("account-budget"),
  deleteDialog: $("delete-dialog"),
  deleteDialogText: $("delete-dialog-text"),
};

const CHAT_PAGE = 20;
const MESSAGE_PAGE = 30;
const POLL_MS = 4000;
const TERMINAL = new Set(["done", "cancelled", "failed"]);
const SAVED_PREFIX = "chat-ui:run:";

const state = {
  chatId: null,
  chats: new Map(), // id -> { chat, li }
  chatCursor: null,
  chatsDone: false,
  chatsLoading: false,
  msgCursor: null,
  msgsDone: true,
  msgsLoading: false,
  openToken: 0,
  run: null, // the active run's view (see startRun)
  sending: false,
  retryTimer: null,
};

// ---------------------------------------------------------------- small helpers

function chatLabel(chat) {
  return chat.title && chat.title.trim() ? chat.title : "New chat";
}

function formatSeconds(total) {
  const s = Math.max(0, Math.round(total));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
}

function nearBottom() {
  const box = ui.messages;
  return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
}

function scrollToBottom() {
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

function isVisibleIn(element, container) {
  const a = element.getBoundingClientRect();
  const b = container.getBoundingClientRect();
  return a.bottom >= b.top - 200 && a.top <= b.bottom + 200;
}

function setRunStatus(text) {
  if (ui.runStatus.textContent !== text) ui.runStatus.textContent = text;
}

function updateEmptyState() {
  ui.emptyState.hidden = ui.messageList.childElementCount > 0 || state.msgsLoading;
}

// ---------------------------------------------------------------- alerts (errors, 429 busy with retry)

function clearAlert() {
  clearInterval(state.retryTimer);
  state.retryTimer = null;
  ui.alert.hidden = true;
  ui.alert.classList.remove("busy");
  ui.alertText.textContent = "";
  ui.alertRetry.hidden = true;
  ui.alertRetry.onclick = null;
}

function showError(message) {
  clearAlert();
  ui.alertText.textContent = message;
  ui.alert.hidden = false;
}

/** 429: say why, count down Retry-After on the button, then let the user retry with one press. */
function showBusy(error, retry) {
  clearAlert();
  let left = error.retryAfter ?? 5;
  ui.alert.classList.add("busy");
  const saysWhen = /retry in/i.test(error.message);
  ui.alertText.textContent = `Busy: ${error.message}${saysWhen ? "" : ` Retry in ${formatSeconds(left)}.`}`;
  ui.alert.hidden = false;
  ui.alertRetry.hidden = false;
  ui.alertRetry.onclick = () => {
    clearAlert();
    retry();
  };
  const tick = () => {
    if (left > 0) {
      ui.alertRetry.disabled = true;
      ui.alertRetry.textContent = `Retry in ${formatSeconds(left)}`;
      left -= 1;
    } else {
      clearInterval(state.retryTimer);
      ui.alertRetry.disabled = false;
      ui.alertRetry.textContent = "Retry now";
    }
  };
  tick();
  state.retryTimer = setInterval(tick, 1000);
}

// ---------------------------------------------------------------- account (tier and budget)

async function refreshMe() {
  try {
    const me = await api("GET", "/api/me");
    ui.accountTier.textContent = `${me.tier} tier`;
    ui.accountTier.hidden = false;
    if (me.remaining_tokens === null || me.remaining_tokens === undefined) {
      ui.accountBudget.hidden = true;
    } else {
      const left = Math.max(0, Math.floor(me.remaining_tokens)).toLocaleString();
      ui.accountBudget.textContent = `${left} tokens left`;
      const { bucket_capacity_tokens: capacity, bucket_refill_per_s: refill } = me.limits;
      ui.accountBudget.title = `Token budget: ${left} of ${capacity.toLocaleString()}, refilling ${refill} per second`;
      ui.accountBudget.hidden = false;
    }
  } catch {
    // Not essential: the header just stays without tier and budget.
  }
}

// ---------------------------------------------------------------- sidebar

function buildChatItem(chat) {
  const li = document.createElement("li");
  li.className = "chat-item";
  li.dataset.chatId = String(chat.id);
  const link = document.createElement("a");
  link.className = "chat-link";
  link.href = `/c/${chat.id}`;
  link.addEventListener("click", (event) => {
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    openChat(chat.id, { push: true });
  });
  const rename = document.createElement("button");
  rename.type = "button";
  rename.className = "icon-button chat-rename";
  rename.textContent = "✎";
  rename.addEventListener("click", () => startRename(chat.id));
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "icon-button chat-delete";
  remove.textContent = "✕";
  remove.addEventListener("click", () => confirmDelete(chat.id));
  const actions = document.createElement("div");
  actions.className = "chat-actions";
  actions.append(rename, remove);
  li.append(link, actions);
  return li;
}

function paintChatItem(entry) {
  const label = chatLabel(entry.chat);
  const link = entry.li.querySelector(".chat-link");
  if (link) link.textContent = label;
  entry.li.querySelector(".chat-rename").setAttribute("aria-label", `Rename chat “${label}”`);
  entry.li.querySelector(".chat-delete").setAttribute("aria-label", `Delete chat “${label}”`);
  const current = entry.chat.id === state.chatId;
  entry.li.classList.toggle("current", current);
  if (link) {
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function upsertChat(chat, { toTop = false, onlyIfKnown = false } = {}) {
  let entry = state.chats.get(chat.id);
  if (!entry) {
    if (onlyIfKnown) return;
    entry = { chat, li: buildChatItem(chat) };
    state.chats.set(chat.id, entry);
    if (toTop) ui.chatList.prepend(entry.li);
    else ui.chatList.append(entry.li);
  } else {
    entry.chat = { ...entry.chat, ...chat };
    if (toTop && ui.chatList.firstElementChild !== entry.li) ui.chatList.prepend(entry.li);
  }
  paintChatItem(entry);
  if (chat.id === state.chatId) ui.chatTitle.textContent = chatLabel(entry.chat);
  ui.chatListStatus.textContent = "";
}

function markCurrentChat() {
  for (const entry of state.chats.values()) paintChatItem(entry);
}

async function loadMoreChats() {
  if (state.chatsLoading || state.chatsDone) return;
  state.chatsLoading = true;
  ui.chatListStatus.textContent = "Loading chats…";
  try {
    const query = new URLSearchParams({ limit: String(CHAT_PAGE) });
    if (state.chatCursor) query.set("cursor", state.chatCursor);
    const page = await api("GET", `/api/chats?${query}`);
    for (const chat of page.results) if (!state.chats.has(chat.id)) upsertChat(chat);
    state.chatCursor = page.next_cursor;
    state.chatsDone = !page.next_cursor;
    ui.chatListStatus.textContent = state.chats.size === 0 ? "No chats yet." : "";
  } catch (error) {
    ui.chatListStatus.textContent = `Could not load chats: ${error.message}`;
    return;
  } finally {
    state.chatsLoading = false;
  }
  // Keep going while the end of the list is on screen (a tall window shows more than one page).
  if (!state.chatsDone && isVisibleIn(ui.chatListSentinel, ui.chatListScroll)) loadMoreChats();
}

async function refreshChat(chatId, { toTop = true } = {}) {
  try {
    const chat = await api("GET", `/api/chats/${chatId}`);
    upsertChat(chat, { toTop });
  } catch {
    // The chat may have been deleted meanwhile; the sidebar simply keeps what it shows.
  }
}

function startRename(chatId) {
  const entry = state.chats.get(chatId);
  if (!entry || entry.li.querySelector("input")) return;
  const link = entry.li.querySelector(".chat-link");
  const form = document.createElement("form");
  form.className = "rename-form";
  const input = document.createElement("input");
  input.type = "text";
  input.maxLength = 200;
  input.value = entry.chat.title || "";
  input.setAttribute("aria-label", "New chat title (Enter saves, Escape cancels)");
  form.append(input);
  link.replaceWith(form);
  input.focus();
  input.select();
  let finished = false;
  const restore = () => {
    form.replaceWith(link);
    paintChatItem(entry);
  };
  const save = async () => {
    if (finished) return;
    finished = true;
    const title = input.value.trim();
    restore();
    if (title === (entry.chat.title || "")) return;
    try {
      const chat = await api("PATCH", `/api/chats/${chatId}`, { title });
      upsertChat(chat);
    } catch (error) {
      showError(`Could not rename the chat: ${error.message}`);
    }
    link.focus();
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    save();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      finished = true;
      restore();
      link.focus();
    }
  });
  input.addEventListener("blur", () => save());
}

function confirmDelete(chatId) {
  const entry = state.chats.get(chatId);
  if (!entry) return;
  ui.deleteDialogText.textContent = `“${chatLabel(entry.chat)}” and all its messages will be deleted.`;
  ui.deleteDialog.returnValue = "";
  ui.deleteDialog.onclose = async () => {
    if (ui.deleteDialog.returnValue !== "confirm") {
      entry.li.querySelector(".chat-delete").focus();
      return;
    }
    try {
      await api("DELETE", `/api/chats/${chatId}`);
    } catch (error) {
      if (error.status !== 404) {
        showError(`Could not delete the chat: ${error.message}`);
        return;
      }
    }
    const next = entry.li.nextElementSibling || entry.li.previousElementSibling;
    entry.li.remove();
    state.chats.delete(chatId);
    if (state.run && state.run.chatId === chatId) {
      // The server cancelled the chat's run with it: forget its saved progress too.
      const runId = state.run.id;
      detachRun();
      clearSaved(runId);
    }
    if (state.chatId === chatId) openChat(null, { push: true });
    const focusTarget = next ? next.querySelector(".chat-link") : ui.newChat;
    (focusTarget || ui.newChat).focus();
    if (state.chats.size === 0) ui.chatListStatus.textContent = "No chats yet.";
  };
  ui.deleteDialog.showModal();
}

// Mobile: the sidebar is a drawer.
function setSidebarOpen(open, { focus = true } = {}) {
  document.body.classList.toggle("sidebar-open", open);
  ui.sidebarToggle.setAttribute("aria-expanded", String(open));
  ui.sidebarBackdrop.hidden = !open;
  if (open && focus) ui.newChat.focus();
  if (!open && focus && ui.sidebar.contains(document.activeElement)) ui.sidebarToggle.focus();
}

// ---------------------------------------------------------------- messages

function buildMessage(message) {
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
  li.append(who, body, meta);
  return li;
}

function appendMessage(message) {
  const stick = nearBottom();
  const li = buildMessage(message);
  ui.messageList.append(li);
  updateEmptyState();
  if (stick || message.role === "user") scrollToBottom();
  return li;
}

async function loadOlderMessages() {
  if (state.msgsLoading || state.msgsDone || !state.chatId) return null;
  const { chatId, openToken } = state;
  state.msgsLoading = true;
  ui.messagesStatus.textContent = ui.messageList.childElementCount ? "Loading earlier messages…" : "Loading…";
  let page;
  const query = new URLSearchParams({ limit: String(MESSAGE_PAGE) });
  if (state.msgCursor) query.set("cursor", state.msgCursor);
  try {
    page = await api("GET", `/api/chats/${chatId}/messages?${query}`);
  } catch (error) {
    if (openToken === state.openToken) ui.messagesStatus.textContent = `Could not load messages: ${error.message}`;
    state.msgsLoading = false;
    return null;
  }
  state.msgsLoading = false;
  if (openToken !== state.openToken) return null;
  // Prepend older messages without moving what the reader is looking at.
  const box = ui.messages;
  const fromBottom = box.scrollHeight - box.scrollTop;
  const nodes = page.results.slice().reverse().map(buildMessage);
  ui.messageList.prepend(...nodes);
  box.scrollTop = box.scrollHeight - fromBottom;
  state.msgCursor = page.next_cursor;
  state.msgsDone = !page.next_cursor;
  const pagedBack = Boolean(query.get("cursor"));
  ui.messagesStatus.textContent = state.msgsDone && pagedBack ? "Start of the conversation" : "";
  updateEmptyState();
  return page;
}

function maybeLoadOlder() {
  if (!state.msgsDone && !state.msgsLoading && isVisibleIn(ui.messagesSentinel, ui.messages)) {
    loadOlderMessages().then((page) => {
      if (page) maybeLoadOlder();
    });
  }
}

function chatIdFromPath() {
  const match = window.location.pathname.match(/^\/c\/(\d+)\/?$/);
  return match ? Number(match[1]) : null;
}

async function openChat(chatId, { push = false } = {}) {
  if (push) window.history.pushState({ chatId }, "", chatId ? `/c/${chatId}` : "/");
  detachRun();
  clearAlert();
  setRunStatus("");
  const openToken = ++state.openToken;
  state.chatId = chatId;
  state.msgCursor = null;
  state.msgsDone = !chatId;
  state.msgsLoading = false;
  ui.messageList.replaceChildren();
  ui.messagesStatus.textContent = "";
  ui.chatTitle.textContent = chatId ? state.chats.get(chatId)?.chat.title || "" : "New chat";
  document.title = "Chat";
  markCurrentChat();
  setComposerRunning(false);
  if (window.matchMedia("(max-width: 768px)").matches) setSidebarOpen(false, { focus: false });
  updateEmptyState();
  if (!chatId) {
    ui.prompt.focus();
    return;
  }
  let chat;
  try {
    chat = await api("GET", `/api/chats/${chatId}`);
  } catch (error) {
    if (openToken !== state.openToken) return;
    if (error.status === 404) {
      state.chatId = null;
      ui.chatTitle.textContent = "Chat not found";
      showError("This chat does not exist or was deleted.");
    } else {
      showError(`Could not open the chat: ${error.message}`);
    }
    return;
  }
  if (openToken !== state.openToken) return;
  upsertChat(chat, { onlyIfKnown: true });
  ui.chatTitle.textContent = chatLabel(chat);
  document.title = `${chatLabel(chat)} · Chat`;
  const page = await loadOlderMessages();
  if (openToken !== state.openToken) return;
  scrollToBottom();
  const run = chat.active_run;
  if (run && !TERMINAL.has(run.status)) {
    // If the answer landed between the two reads it is already in the history: nothing to resume.
    const newest = page && page.results[0];
    const answered = newest && newest.role === "assistant" && newest.id > run.user_message;
    if (!answered) startRun(run);
  }
  maybeLoadOlder();
  if (!state.run) ui.prompt.focus();
}

// ---------------------------------------------------------------- the active run (streaming answer)

function loadSaved(runId) {
  try {
    const saved = JSON.parse(sessionStorage.getItem(SAVED_PREFIX + runId) || "null");
    if (saved && typeof saved.text === "string" && Number.isInteger(saved.lastEventId)) return saved;
  } catch {
    // Unreadable: start from the beginning of the stream.
  }
  return null;
}

function saveProgress(view) {
  try {
    sessionStorage.setItem(SAVED_PREFIX + view.id, JSON.stringify({ lastEventId: view.lastEventId, text: view.text }));
  } catch {
    // Storage full or disabled: a reload then replays the stream from its start.
  }
}

function clearSaved(runId) {
  try {
    sessionStorage.removeItem(SAVED_PREFIX + runId);
  } catch {
    // ignore
  }
}

function setComposerRunning(running) {
  ui.send.hidden = running;
  ui.stop.hidden = !running;
  ui.stop.disabled = false;
}

function describeStatus(status, data = {}) {
  if (status === "queued") {
    const parts = ["Queued"];
    if (Number.isFinite(data.queue_position)) parts.push(`position ${data.queue_position}`);
    if (Number.isFinite(data.estimated_wait_s)) parts.push(`about ${formatSeconds(data.estimated_wait_s)} to wait`);
    return parts.join(" · ");
  }
  if (status === "streaming") return "Writing…";
  if (status === "cancelling") return "Stopping…";
  return "";
}

function showRunState(view, status, data = {}) {
  const text = describeStatus(status, data);
  view.status = status;
  view.bubble.dataset.status = status;
  if (view.connectionLost) return;
  view.meta.textContent = text;
  // Announce queue and stop states; "Writing…" would only repeat what the live text already says.
  setRunStatus(status === "streaming" ? "" : text);
}

function renderRun(view) {
  view.renderQueued = false;
  if (view.finished) return;
  const stick = nearBottom();
  renderMarkdown(view.body, view.text);
  saveProgress(view);
  if (stick) scrollToBottom();
}

function scheduleRender(view) {
  if (view.renderQueued) return;
  view.renderQueued = true;
  if (document.hidden) setTimeout(() => renderRun(view), 100);
  else requestAnimationFrame(() => renderRun(view));
}

function startRun(run) {
  detachRun();
  const bubble = appendMessage({ role: "assistant", content: "" });
  bubble.classList.add("streaming");
  bubble.dataset.runId = String(run.id);
  const body = bubble.querySelector(".message-body");
  body.setAttribute("aria-busy", "true");
  const saved = loadSaved(run.id);
  const view = {
    id: run.id,
    chatId: run.chat,
    streamUrl: run.stream_url,
    text: saved ? saved.text : "",
    lastEventId: saved ? saved.lastEventId : 0,
    bubble,
    body,
    meta: bubble.querySelector(".message-meta"),
    stream: null,
    pollTimer: null,
    lastActivity: Date.now(),
    finished: false,
    renderQueued: false,
    connectionLost: false,
    lostTimer: null,
    status: run.status,
  };
  state.run = view;
  if (view.text) renderMarkdown(body, view.text); // the partial answer shows at once after a reload
  scrollToBottom();
  setComposerRunning(true);
  showRunState(view, run.status, run);
  connectStream(view);
  view.pollTimer = setInterval(() => pollRun(view), POLL_MS);
}

function connectStream(view) {
  if (view.stream) view.stream.close();
  view.stream = new RunStream({
    url: view.streamUrl,
    lastEventId: view.lastEventId,
    onEvent: (name, data, lastEventId) => onRunEvent(view, name, data, lastEventId),
    onConnection: (connection) => onConnection(view, connection),
  }).start();
}

function onConnection(view, connection) {
  if (view.finished) return;
  if (connection === "open") {
    clearTimeout(view.lostTimer);
    view.lostTimer = null;
    if (view.connectionLost) {
      view.connectionLost = false;
      showRunState(view, view.status);
      setRunStatus("Reconnected.");
    }
    return;
  }
  // The stream gave up (an error status, or 204: nothing more to send): the run may be over already.
  if (connection === "retrying") pollRun(view, { force: true });
  // A connection the server closed is usually back within a moment: say so only if it stays down.
  if (view.connectionLost || view.lostTimer) return;
  view.lostTimer = setTimeout(() => {
    view.lostTimer = null;
    if (view.finished || view.connectionLost) return;
    const open = view.stream && view.stream.source && view.stream.source.readyState === EventSource.OPEN;
    if (open) return;
    view.connectionLost = true;
    view.meta.textContent = "Connection lost: reconnecting…";
    setRunStatus("Connection lost: reconnecting…");
  }, 2000);
}

function onRunEvent(view, name, data, lastEventId) {
  if (view.finished) return;
  view.lastActivity = Date.now();
  if (name !== "stream-error") view.lastEventId = lastEventId;
  if (view.connectionLost || view.lostTimer) onConnection(view, "open");
  switch (name) {
    case "delta":
      view.text += typeof data.text === "string" ? data.text : "";
      if (view.status !== "streaming" && view.status !== "cancelling") showRunState(view, "streaming");
      scheduleRender(view);
      break;
    case "reset":
      view.text = "";
      scheduleRender(view);
      break;
    case "status":
      showRunState(view, data.status, data);
      break;
    case "done":
      finishRun(view, {
        status: data.status || "done",
        finishReason: data.finish_reason,
        messageId: data.message_id,
      });
      break;
    case "error":
      finishRun(view, { status: "failed", error: data.message || "The answer could not be generated." });
      break;
    case "stream-error":
      // The stream endpoint cannot serve this run: follow it by polling instead.
      view.stream.close();
      pollRun(view, { force: true });
      break;
    default:
      break;
  }
}

async function pollRun(view, { force = false } = {}) {
  if (view.finished || view.polling) return;
  if (!force && Date.now() - view.lastActivity < POLL_MS) return;
  view.polling = true;
  try {
    const run = await api("GET", `/api/runs/${view.id}`);
    if (view.finished) return;
    if (TERMINAL.has(run.status)) {
      // The stream went quiet and the run is over: show what Postgres holds.
      finishRun(view, {
        status: run.status,
        finishReason: run.finish_reason,
        messageId: run.assistant_message ? run.assistant_message.id : null,
        text: run.assistant_message ? run.assistant_message.content : undefined,
        error: run.error,
      });
    } else if (run.status !== view.status && !(view.status === "streaming" && run.status === "queued")) {
      showRunState(view, run.status, run);
    } else if (run.status === "queued" && Number.isFinite(run.queue_position)) {
      showRunState(view, run.status, run);
    }
  } catch (error) {
    if (error.status === 404) finishRun(view, { status: "failed", error: "This answer is gone: the chat was deleted." });
  } finally {
    view.polling = false;
  }
}

function finishRun(view, { status, finishReason, messageId, text, error }) {
  if (view.finished) return;
  view.finished = true;
  if (view.stream) view.stream.close();
  clearInterval(view.pollTimer);
  clearTimeout(view.lostTimer);
  if (typeof text === "string") view.text = text;
  renderMarkdown(view.body, view.text);
  view.body.setAttribute("aria-busy", "false");
  view.bubble.classList.remove("streaming");
  view.bubble.dataset.status = status;
  view.bubble.classList.add(`run-${status}`);
  if (messageId) view.bubble.dataset.messageId = String(messageId);
  let note = "";
  if (status === "cancelled") note = view.text ? "Stopped" : "Stopped before any text was written";
  else if (status === "failed") note = `Failed: ${error || "the answer could not be generated."}`;
  else if (finishReason === "length") note = "Cut off at the length limit";
  view.meta.textContent = note;
  clearSaved(view.id);
  if (state.run === view) {
    state.run = null;
    setComposerRunning(false);
    setRunStatus(status === "cancelled" ? "Answer stopped." : status === "failed" ? note : "Answer complete.");
  }
  if (status === "failed") showError(note);
  if (nearBottom()) scrollToBottom();
  refreshMe();
  refreshChat(view.chatId);
}

/** Stops following the active run (another chat opened); the run goes on and can be resumed later. */
function detachRun() {
  const view = state.run;
  if (!view) return;
  if (view.stream) view.stream.close();
  clearInterval(view.pollTimer);
  clearTimeout(view.lostTimer);
  saveProgress(view);
  view.finished = true;
  state.run = null;
}

async function stopRun() {
  const view = state.run;
  if (!view || view.finished) return;
  ui.stop.disabled = true;
  showRunState(view, "cancelling");
  try {
    const run = await api("POST", `/api/runs/${view.id}/cancel`);
    if (TERMINAL.has(run.status)) {
      finishRun(view, {
        status: run.status,
        finishReason: run.finish_reason,
        messageId: run.assistant_message ? run.assistant_message.id : null,
        text: run.assistant_message ? run.assistant_message.content : undefined,
        error: run.error,
      });
    }
    // Otherwise "cancelling": the worker aborts within a step and the stream's `done` ends the view.
  } catch (error) {
    showError(`Could not stop the answer: ${error.message}`);
    ui.stop.disabled = false;
  }
}

// ---------------------------------------------------------------- sending a prompt

async function send() {
  const content = ui.prompt.value;
  if (!content.trim() || state.sending) return;
  if (state.run) {
    setRunStatus("An answer is still being written: wait for it or press Stop.");
    return;
  }
  clearAlert();
  state.sending = true;
  ui.send.disabled = true;
  setRunStatus("Sending…");
  try {
    let chatId = state.chatId;
    if (!chatId) {
      const chat = await api("POST", "/api/chats", { title: "" });
      chatId = chat.id;
      state.chatId = chatId;
      state.msgsDone = true;
      window.history.pushState({ chatId }, "", `/c/${chatId}`);
      upsertChat(chat, { toTop: true });
      markCurrentChat();
    }
    const accepted = await api("POST", `/api/chats/${chatId}/messages`, { content });
    if (state.chatId !== chatId) return;
    ui.prompt.value = "";
    autosize();
    appendMessage(accepted.message);
    startRun({ ...accepted.run, stream_url: accepted.stream_url || accepted.run.stream_url });
    refreshChat(chatId);
    refreshMe();
  } catch (error) {
    if (error.status === 429) {
      showBusy(error, send);
      refreshMe();
    } else if (error.status === 409 && state.chatId) {
      showError(error.message);
      const chat = await api("GET", `/api/chats/${state.chatId}`).catch(() => null);
      if (chat && chat.active_run && !state.run) startRun(chat.active_run);
    } else {
      showError(error.message);
    }
  } finally {
    state.sending = false;
    ui.send.disabled = false;
    if (ui.runStatus.textContent === "Sending…") setRunStatus("");
  }
}

function autosize() {
  ui.prompt.style.height = "auto";
  ui.prompt.style.height = `${Math.min(ui.prompt.scrollHeight, 240)}px`;
}

// ---------------------------------------------------------------- wiring

function init() {
  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  ui.prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !event.altKey && !event.ctrlKey && !event.metaKey) {
      event.preventDefault();
      send();
    }
  });
  ui.prompt.addEventListener("input", autosize);
  ui.stop.addEventListener("click", stopRun);
  ui.newChat.addEventListener("click", () => openChat(null, { push: true }));
  ui.alertClose.addEventListener("click", clearAlert);
  ui.sidebarToggle.addEventListener("click", () => setSidebarOpen(!document.body.classList.contains("sidebar-open")));
  ui.sidebarBackdrop.addEventListener("click", () => setSidebarOpen(false));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.body.classList.contains("sidebar-open")) setSidebarOpen(false);
  });
  window.addEventListener("popstate", () => openChat(chatIdFromPath()));
  window.addEventListener("online", () => {
    if (state.run && !state.run.finished) connectStream(state.run);
  });

  new IntersectionObserver((entries) => {
    if (entries.some((entry) => entry.isIntersecting)) loadMoreChats();
  }, { root: ui.chatListScroll, rootMargin: "200px" }).observe(ui.chatListSentinel);
  new IntersectionObserver((entries) => {
    if (entries.some((entry) => entry.isIntersecting) && state.chatId && ui.messageList.childElementCount) maybeLoadOlder();
  }, { root: ui.messages, rootMargin: "200px" }).observe(ui.messagesSentinel);

  refreshMe();
  loadMoreChats();
  openChat(chatIdFromPath());
  document.body.dataset.ready = "true";
}

init();
