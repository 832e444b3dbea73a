// The sidebar: the list of the user's chats (paged by cursor, newest first), which one is open,
// new / rename / delete, and on narrow screens the drawer it lives in.

import { api } from "./api.js";
import { isVisibleIn } from "./dom.js";

const CHAT_PAGE = 20;

/** The name a chat goes by: its title, or "New chat" while it has none. */
export function chatLabel(chat) {
  return chat.title && chat.title.trim() ? chat.title : "New chat";
}

export class Sidebar {
  /**
   * `currentChatId()` says which chat is open. Callbacks: `onOpen(chatId)` (a chat link was clicked),
   * `onNewChat()`, `onCurrentChanged(chat)` (the open chat's row changed: its title), `onDeleted(chatId)`
   * (after the server deleted it and its row is gone) and `onError(message)`.
   */
  constructor(ui, { currentChatId, onOpen, onNewChat, onCurrentChanged, onDeleted, onError }) {
    this.ui = ui;
    this.currentChatId = currentChatId;
    this.onOpen = onOpen;
    this.onCurrentChanged = onCurrentChanged;
    this.onDeleted = onDeleted;
    this.onError = onError;
    this.chats = new Map(); // id -> { chat, li }
    this.cursor = null;
    this.done = false;
    this.loading = false;

    ui.newChat.addEventListener("click", () => onNewChat());
    ui.sidebarToggle.addEventListener("click", () => this.setOpen(!this.isOpen()));
    ui.sidebarBackdrop.addEventListener("click", () => this.setOpen(false));
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.isOpen()) this.setOpen(false);
    });
  }

  /** Loads the next page whenever the end of the list scrolls into view. */
  observe() {
    new IntersectionObserver((entries) => {
      if (entries.some((entry) => entry.isIntersecting)) this.loadMore();
    }, { root: this.ui.chatListScroll, rootMargin: "200px" }).observe(this.ui.chatListSentinel);
  }

  /** The stored title of a chat in the list ("" when it has none or is not listed). */
  titleOf(chatId) {
    return this.chats.get(chatId)?.chat.title || "";
  }

  async loadMore() {
    if (this.loading || this.done) return;
    this.loading = true;
    this.ui.chatListStatus.textContent = "Loading chats…";
    try {
      const query = new URLSearchParams({ limit: String(CHAT_PAGE) });
      if (this.cursor) query.set("cursor", this.cursor);
      const page = await api("GET", `/api/chats?${query}`);
      for (const chat of page.results) if (!this.chats.has(chat.id)) this.upsert(chat);
      this.cursor = page.next_cursor;
      this.done = !page.next_cursor;
      this.ui.chatListStatus.textContent = this.chats.size === 0 ? "No chats yet." : "";
    } catch (error) {
      this.ui.chatListStatus.textContent = `Could not load chats: ${error.message}`;
      return;
    } finally {
      this.loading = false;
    }
    // Keep going while the end of the list is on screen (a tall window shows more than one page).
    if (!this.done && isVisibleIn(this.ui.chatListSentinel, this.ui.chatListScroll)) this.loadMore();
  }

  /** Adds or updates a chat's row (`toTop`: move it first; `onlyIfKnown`: never add it). */
  upsert(chat, { toTop = false, onlyIfKnown = false } = {}) {
    let entry = this.chats.get(chat.id);
    if (!entry) {
      if (onlyIfKnown) return;
      entry = { chat, li: this._buildItem(chat) };
      this.chats.set(chat.id, entry);
      if (toTop) this.ui.chatList.prepend(entry.li);
      else this.ui.chatList.append(entry.li);
    } else {
      entry.chat = { ...entry.chat, ...chat };
      if (toTop && this.ui.chatList.firstElementChild !== entry.li) this.ui.chatList.prepend(entry.li);
    }
    this._paint(entry);
    if (chat.id === this.currentChatId()) this.onCurrentChanged(entry.chat);
    this.ui.chatListStatus.textContent = "";
  }

  /** Reads a chat again (after a prompt or an answer: its title and place in the list may have changed). */
  async refresh(chatId, { toTop = true } = {}) {
    try {
      const chat = await api("GET", `/api/chats/${chatId}`);
      this.upsert(chat, { toTop });
    } catch {
      // The chat may have been deleted meanwhile; the sidebar simply keeps what it shows.
    }
  }

  /** Marks the open chat's row (after another chat was opened). */
  markCurrent() {
    for (const entry of this.chats.values()) this._paint(entry);
  }

  isOpen() {
    return document.body.classList.contains("sidebar-open");
  }

  /** Narrow screens: the sidebar is a drawer. */
  setOpen(open, { focus = true } = {}) {
    const { ui } = this;
    document.body.classList.toggle("sidebar-open", open);
    ui.sidebarToggle.setAttribute("aria-expanded", String(open));
    ui.sidebarBackdrop.hidden = !open;
    if (open && focus) ui.newChat.focus();
    if (!open && focus && ui.sidebar.contains(document.activeElement)) ui.sidebarToggle.focus();
  }

  _buildItem(chat) {
    const li = document.createElement("li");
    li.className = "chat-item";
    li.dataset.chatId = String(chat.id);
    const link = document.createElement("a");
    link.className = "chat-link";
    link.href = `/c/${chat.id}`;
    link.addEventListener("click", (event) => {
      if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      this.onOpen(chat.id);
    });
    const rename = document.createElement("button");
    rename.type = "button";
    rename.className = "icon-button chat-rename";
    rename.textContent = "✎";
    rename.addEventListener("click", () => this._startRename(chat.id));
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "icon-button chat-delete";
    remove.textContent = "✕";
    remove.addEventListener("click", () => this._confirmDelete(chat.id));
    const actions = document.createElement("div");
    actions.className = "chat-actions";
    actions.append(rename, remove);
    li.append(link, actions);
    return li;
  }

  _paint(entry) {
    const label = chatLabel(entry.chat);
    const link = entry.li.querySelector(".chat-link");
    if (link) link.textContent = label;
    entry.li.querySelector(".chat-rename").setAttribute("aria-label", `Rename chat “${label}”`);
    entry.li.querySelector(".chat-delete").setAttribute("aria-label", `Delete chat “${label}”`);
    const current = entry.chat.id === this.currentChatId();
    entry.li.classList.toggle("current", current);
    if (link) {
      if (current) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
  }

  _startRename(chatId) {
    const entry = this.chats.get(chatId);
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
      this._paint(entry);
    };
    const save = async () => {
      if (finished) return;
      finished = true;
      const title = input.value.trim();
      restore();
      if (title === (entry.chat.title || "")) return;
      try {
        const chat = await api("PATCH", `/api/chats/${chatId}`, { title });
        this.upsert(chat);
      } catch (error) {
        this.onError(`Could not rename the chat: ${error.message}`);
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

  _confirmDelete(chatId) {
    const { ui } = this;
    const entry = this.chats.get(chatId);
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
          this.onError(`Could not delete the chat: ${error.message}`);
          return;
        }
      }
      const next = entry.li.nextElementSibling || entry.li.previousElementSibling;
      entry.li.remove();
      this.chats.delete(chatId);
      this.onDeleted(chatId);
      const focusTarget = next ? next.querySelector(".chat-link") : ui.newChat;
      (focusTarget || ui.newChat).focus();
      if (this.chats.size === 0) ui.chatListStatus.textContent = "No chats yet.";
    };
    ui.deleteDialog.showModal();
  }
}
