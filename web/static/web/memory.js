// Memory across chats: a dialog behind the sidebar's "Memory" button. The user's switch (GET / PATCH
// /api/memory), a memory added by hand (POST /api/memories), their memories searched and paged (GET
// /api/memories?q=&cursor=), one deleted (DELETE /api/memories/{id}) or all of them (DELETE /api/memories).

import { api } from "./api.js";
import { chatLabel } from "./sidebar.js";

const DEBOUNCE_MS = 250;
const MEMORY_PAGE = 20;
export const MAX_MEMORY_CHARS = 2000;

/** "1 memory", "3 memories". */
function countOf(n) {
  return `${n} ${n === 1 ? "memory" : "memories"}`;
}

/** A memory's date, short and in the user's locale ("" when it cannot be read). */
function shortDate(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleDateString(undefined, { dateStyle: "medium" });
}

export class MemoryDialog {
  /** `onOpenChat(chatId)`: a memory's chat was chosen (the dialog has closed). */
  constructor(ui, { onOpenChat }) {
    this.ui = ui;
    this.onOpenChat = onOpenChat;
    this.state = null; // the server's last {enabled, available, count}
    this.query = ""; // the search the list shows ("": all memories)
    this.cursor = null; // the list's next page (null: none)
    this.asked = 0; // only the latest list request's answer is shown
    this.listing = false; // a first page is on its way
    this.saving = false; // a PATCH of the switch is on its way
    this.timer = null;
    this.openingChat = false;

    ui.memoryButton.addEventListener("click", () => this.open());
    ui.memoryDialog.addEventListener("keydown", (event) => {
      // Escape closes the dialog (the browser's own), and nothing behind it (the sidebar's drawer).
      if (event.key === "Escape") event.stopPropagation();
    });
    ui.memoryDialog.addEventListener("close", () => {
      clearTimeout(this.timer);
      if (!this.openingChat) ui.memoryButton.focus();
      this.openingChat = false;
    });
    ui.memoryEnabled.addEventListener("click", (event) => {
      if (this.saving) event.preventDefault(); // one change at a time: the box keeps its state meanwhile
    });
    ui.memoryEnabled.addEventListener("change", () => this.setEnabled(ui.memoryEnabled.checked));
    ui.memoryAddForm.addEventListener("submit", (event) => {
      event.preventDefault();
      this.add();
    });
    ui.memorySearch.addEventListener("input", () => {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.load(), DEBOUNCE_MS);
    });
    ui.memorySearch.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && ui.memorySearch.value) {
        // The first Escape clears the search; the next one closes the dialog.
        event.preventDefault();
        event.stopPropagation();
        ui.memorySearch.value = "";
        clearTimeout(this.timer);
        this.load();
      }
    });
    ui.memoryMore.addEventListener("click", () => this.load({ more: true }));
    ui.memoryClear.addEventListener("click", () => this.clear());
    ui.memoryAddInput.maxLength = MAX_MEMORY_CHARS;
  }

  /** Shows the dialog with the switch and the first page of memories, both read afresh. */
  open() {
    const { ui } = this;
    ui.memoryError.textContent = "";
    if (!ui.memoryDialog.open) ui.memoryDialog.showModal();
    (ui.memoryEnabled.disabled ? ui.memorySearch : ui.memoryEnabled).focus();
    this.loadState();
    this.load();
  }

  async loadState() {
    try {
      this.#showState(await api("GET", "/api/memory"));
    } catch (error) {
      this.ui.memoryError.textContent = `Could not read your memory setting: ${error.message}`;
    }
  }

  /** Turns memory on or off; the switch goes back and the reason shows when the server refuses. */
  async setEnabled(enabled) {
    const { ui } = this;
    this.saving = true;
    ui.memoryEnabled.setAttribute("aria-busy", "true");
    ui.memoryError.textContent = "";
    try {
      this.#showState(await api("PATCH", "/api/memory", { enabled }));
    } catch (error) {
      ui.memoryEnabled.checked = !enabled;
      ui.memoryError.textContent = `Could not turn memory ${enabled ? "on" : "off"}: ${error.message}`;
      if (error.code === "memory_unavailable") this.loadState();
    } finally {
      this.saving = false;
      ui.memoryEnabled.removeAttribute("aria-busy");
    }
  }

  /** The list's first page for the search box's text, or (`more`) the next page of the list shown. */
  async load({ more = false } = {}) {
    const { ui } = this;
    const q = more ? this.query : ui.memorySearch.value.trim();
    const asked = ++this.asked;
    const params = new URLSearchParams({ limit: String(MEMORY_PAGE) });
    if (q) params.set("q", q);
    if (more && this.cursor) params.set("cursor", this.cursor);
    if (!more) {
      this.listing = true;
      ui.memoryStatus.textContent = q ? "Searching…" : "Loading memories…";
    }
    ui.memoryMore.disabled = true;
    let page;
    try {
      page = await api("GET", `/api/memories?${params}`);
    } catch (error) {
      if (asked === this.asked) {
        this.listing = false;
        ui.memoryMore.disabled = false;
        ui.memoryStatus.textContent = `Could not load memories: ${error.message}`;
      }
      return;
    }
    if (asked !== this.asked) return;
    this.listing = false;
    this.query = q;
    this.cursor = page.next_cursor || null;
    const items = page.results.map((memory) => this.#item(memory));
    if (more) ui.memoryList.append(...items);
    else ui.memoryList.replaceChildren(...items);
    const hadFocus = document.activeElement === ui.memoryMore;
    ui.memoryMore.disabled = false;
    ui.memoryMore.hidden = !this.cursor;
    if (hadFocus && ui.memoryMore.hidden && items.length) items[0].querySelector("button").focus();
    this.#showStatus();
  }

  /** Adds the typed memory; on a refusal the text stays in the box and the reason shows. */
  async add() {
    const { ui } = this;
    const content = ui.memoryAddInput.value.trim();
    ui.memoryError.textContent = "";
    if (!content) {
      ui.memoryError.textContent = "Write something to remember first.";
      ui.memoryAddInput.focus();
      return;
    }
    ui.memoryAdd.disabled = true;
    try {
      const memory = await api("POST", "/api/memories", { content });
      ui.memoryAddInput.value = "";
      if (this.state) this.state = { ...this.state, count: this.state.count + 1 };
      if (this.query) {
        this.load(); // whether it matches the search is the server's to say
      } else {
        ui.memoryList.prepend(this.#item(memory));
        this.#showStatus();
      }
      ui.memoryClear.disabled = false;
    } catch (error) {
      ui.memoryError.textContent = `Could not add the memory: ${error.message}`;
    } finally {
      ui.memoryAdd.disabled = Boolean(this.state && !this.state.available);
      if (!ui.memoryAddInput.disabled) ui.memoryAddInput.focus();
    }
  }

  /** Deletes all the user's memories, once they confirm. */
  async clear() {
    const { ui } = this;
    if (!window.confirm("Forget all your memories? This cannot be undone.")) return;
    ui.memoryError.textContent = "";
    ui.memoryClear.disabled = true;
    try {
      await api("DELETE", "/api/memories");
    } catch (error) {
      ui.memoryClear.disabled = false;
      ui.memoryError.textContent = `Could not forget your memories: ${error.message}`;
      return;
    }
    ++this.asked; // a list answer still on its way is out of date
    this.listing = false;
    if (this.state) this.state = { ...this.state, count: 0 };
    ui.memorySearch.value = "";
    this.query = "";
    this.cursor = null;
    ui.memoryList.replaceChildren();
    ui.memoryMore.hidden = true;
    ui.memorySearch.focus();
    this.#showStatus();
  }

  async #delete(memory, li) {
    const { ui } = this;
    const button = li.querySelector(".memory-delete");
    ui.memoryError.textContent = "";
    button.disabled = true;
    try {
      await api("DELETE", `/api/memories/${memory.id}`);
    } catch (error) {
      if (error.status !== 404) {
        // 404: already gone (deleted in another tab); the row goes as if this delete did it.
        button.disabled = false;
        ui.memoryError.textContent = `Could not delete the memory: ${error.message}`;
        return;
      }
    }
    const next = li.nextElementSibling || li.previousElementSibling;
    li.remove();
    (next ? next.querySelector(".memory-delete") : ui.memorySearch).focus();
    if (this.state) this.state = { ...this.state, count: Math.max(0, this.state.count - 1) };
    ui.memoryClear.disabled = this.state ? this.state.count === 0 : !ui.memoryList.children.length;
    this.#showStatus();
  }

  #showState(state) {
    const { ui } = this;
    this.state = state;
    const off = !state.available;
    // A tier without memory: nothing is kept or recalled, whatever the user once chose (kept for later).
    ui.memoryEnabled.checked = state.enabled && !off;
    const focused = document.activeElement;
    if (off && (focused === ui.memoryEnabled || focused === ui.memoryAddInput || focused === ui.memoryAdd)) {
      ui.memorySearch.focus(); // a control about to be disabled would drop the focus out of the dialog
    }
    ui.memoryEnabled.disabled = off;
    ui.memoryUnavailable.hidden = !off;
    if (off) ui.memoryEnabled.setAttribute("aria-describedby", "memory-unavailable");
    else ui.memoryEnabled.removeAttribute("aria-describedby");
    ui.memoryAddInput.disabled = off;
    ui.memoryAdd.disabled = off;
    ui.memoryClear.disabled = state.count === 0;
    this.#showStatus();
  }

  /** The status line: how many memories there are, or how many match the search. */
  #showStatus() {
    const { ui } = this;
    if (this.listing) return; // "Loading…" stays until the list is there
    const shown = ui.memoryList.children.length;
    let text;
    if (this.query) {
      const more = this.cursor ? "+" : "";
      text = shown ? `${countOf(shown)}${more} ${shown === 1 && !more ? "matches" : "match"}` : "No memories match.";
    } else {
      const total = this.state ? Math.max(this.state.count, shown) : shown;
      text = total ? countOf(total) : "No memories yet.";
    }
    ui.memoryStatus.textContent = text;
  }

  #item(memory) {
    const li = document.createElement("li");
    li.className = "memory-item";
    li.dataset.memoryId = String(memory.id);
    const body = document.createElement("div");
    body.className = "memory-body";
    const content = document.createElement("p");
    content.className = "memory-content";
    content.id = `memory-${memory.id}-content`;
    content.textContent = memory.content;
    const source = document.createElement("p");
    source.className = "memory-source muted small";
    if (memory.chat !== null && memory.chat !== undefined) {
      const link = document.createElement("a");
      link.href = `/c/${memory.chat}`;
      link.textContent = chatLabel({ title: memory.chat_title });
      link.addEventListener("click", (event) => {
        if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
        event.preventDefault();
        this.openingChat = true;
        this.ui.memoryDialog.close();
        this.onOpenChat(memory.chat);
      });
      source.append("from ", link);
    } else {
      source.append("added by you");
    }
    const date = shortDate(memory.created_at);
    if (date) {
      const time = document.createElement("time");
      time.dateTime = memory.created_at;
      time.textContent = date;
      source.append(" · ", time);
    }
    body.append(content, source);
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "icon-button memory-delete";
    remove.textContent = "✕";
    remove.setAttribute("aria-label", "Delete memory");
    remove.setAttribute("aria-describedby", content.id);
    remove.addEventListener("click", () => this.#delete(memory, li));
    li.append(body, remove);
    return li;
  }
}
