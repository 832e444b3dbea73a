// Search across the user's chats from the sidebar (GET /api/chats/search?q=): while the box has text the
// sidebar lists the hits (title, and a snippet of the newest matching message) instead of the chats.

import { api } from "./api.js";
import { chatLabel } from "./sidebar.js";

const DEBOUNCE_MS = 250;

/** `text` (plain) with its `[start, end)` ranges in <mark>, as text nodes only. */
function highlighted(text, ranges) {
  const nodes = [];
  let at = 0;
  for (const [start, end] of ranges) {
    if (!(start >= at && end > start && end <= text.length)) continue;
    if (start > at) nodes.push(document.createTextNode(text.slice(at, start)));
    const mark = document.createElement("mark");
    mark.textContent = text.slice(start, end);
    nodes.push(mark);
    at = end;
  }
  if (at < text.length) nodes.push(document.createTextNode(text.slice(at)));
  return nodes;
}

export class ChatSearch {
  /** `onOpen(chatId)`: a hit was chosen. */
  constructor({ chatSearch, searchResults, searchStatus, chatListScroll }, { onOpen }) {
    this.input = chatSearch;
    this.results = searchResults;
    this.status = searchStatus;
    this.chatList = chatListScroll;
    this.onOpen = onOpen;
    this.timer = null;
    this.asked = 0; // only the latest query's answer is shown
    this.input.addEventListener("input", () => {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.run(), DEBOUNCE_MS);
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.input.value) {
        event.stopPropagation();
        this.input.value = "";
        this.run();
      }
    });
  }

  get searching() {
    return this.input.value.trim() !== "";
  }

  async run() {
    const q = this.input.value.trim();
    const asked = ++this.asked;
    this.results.hidden = !q;
    this.chatList.hidden = Boolean(q);
    if (!q) {
      this.results.replaceChildren();
      this.status.textContent = "";
      return;
    }
    this.status.textContent = "Searching…";
    let page;
    try {
      page = await api("GET", `/api/chats/search?${new URLSearchParams({ q, limit: "20" })}`);
    } catch (error) {
      if (asked === this.asked) this.status.textContent = `Search failed: ${error.message}`;
      return;
    }
    if (asked !== this.asked) return;
    this.results.replaceChildren(...page.results.map((hit) => this.#item(hit)));
    const count = page.results.length;
    const more = page.next_cursor ? "+" : "";
    this.status.textContent = count ? `${count}${more} chat${count === 1 && !more ? "" : "s"} found` : "No chats found.";
  }

  #item(hit) {
    const li = document.createElement("li");
    li.className = "search-hit";
    const link = document.createElement("a");
    link.className = "chat-link search-link";
    link.href = `/c/${hit.chat}`;
    const title = document.createElement("span");
    title.className = "search-title";
    title.textContent = chatLabel(hit);
    const snippet = document.createElement("span");
    snippet.className = "search-snippet";
    snippet.append(...highlighted(hit.snippet || "", hit.highlights || []));
    link.append(title, snippet);
    link.addEventListener("click", (event) => {
      if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      this.onOpen(hit.chat);
    });
    li.append(link);
    return li;
  }
}
