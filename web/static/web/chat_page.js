// The open chat: opening one (history, then resuming its unfinished answer), sending a prompt, stopping
// the answer, changing its model, and which run the page follows. It coordinates the other parts; each
// keeps its own state.

import { api } from "./api.js";
import { Moderation, isTerminal } from "./constants.js";
import { RunView } from "./run_view.js";
import { chatLabel } from "./sidebar.js";

export class ChatPage {
  /** The parts: `chatTitle` (the heading element), a MessageList, Sidebar, Composer, ModelPicker,
   * AlertBar, AccountBadge and the StatusLine. */
  constructor({ chatTitle, messages, sidebar, composer, picker, alerts, account, statusLine, actions, settings }) {
    this.actions = actions; // the AnswerActions of the message list
    this.settings = settings; // the ChatSettings: the open chat's settings dialog and export links
    this.chatTitle = chatTitle;
    this.messages = messages;
    this.sidebar = sidebar;
    this.composer = composer;
    this.picker = picker;
    this.alerts = alerts;
    this.account = account;
    this.statusLine = statusLine;
    this.run = null; // the RunView being followed (unfinished), or null
    this.sending = false;
    this.savingModel = null; // the PATCH of the open chat's model while it is on its way
  }

  /** The open chat's id; null for a new chat not created yet. */
  get chatId() {
    return this.messages.chatId;
  }

  /** The sidebar's row of the open chat changed. */
  showTitle(chat) {
    this.chatTitle.textContent = chatLabel(chat);
  }

  async open(chatId, { push = false } = {}) {
    if (push) window.history.pushState({ chatId }, "", chatId ? `/c/${chatId}` : "/");
    this.detachRun();
    this.alerts.clear();
    this.statusLine.set("");
    const token = this.messages.open(chatId);
    this.chatTitle.textContent = chatId ? this.sidebar.titleOf(chatId) : "New chat";
    document.title = "Chat";
    this.sidebar.markCurrent();
    this.composer.setRunning(false);
    // A new chat starts on the default model; an existing one shows its own once it has been read.
    this.picker.show("");
    this.picker.setBusy(Boolean(chatId));
    this.settings.show(null);
    if (window.matchMedia("(max-width: 768px)").matches) this.sidebar.setOpen(false, { focus: false });
    if (!chatId) {
      this.#focusComposer();
      return;
    }
    let chat;
    try {
      chat = await api("GET", `/api/chats/${chatId}`);
    } catch (error) {
      if (!this.messages.isCurrent(token)) return;
      this.picker.setBusy(false);
      if (error.status === 404) {
        this.messages.forget();
        this.chatTitle.textContent = "Chat not found";
        this.alerts.error("This chat does not exist or was deleted.");
      } else {
        this.alerts.error(`Could not open the chat: ${error.message}`);
      }
      return;
    }
    if (!this.messages.isCurrent(token)) return;
    this.sidebar.upsert(chat, { onlyIfKnown: true });
    this.chatTitle.textContent = chatLabel(chat);
    this.settings.show(chat);
    this.picker.show(chat.model);
    this.picker.setBusy(false);
    document.title = `${chatLabel(chat)} · Chat`;
    const page = await this.messages.loadOlder();
    if (!this.messages.isCurrent(token)) return;
    this.messages.scrollToBottom();
    const run = chat.active_run;
    if (run && !isTerminal(run.status)) {
      // If the answer landed between the two reads it is already in the history: nothing to resume.
      const newest = page && page.results[0];
      const answered = newest && newest.role === "assistant" && newest.id > run.user_message
        && newest.id !== run.replaces;
      if (!answered) this.startRun(run, { replacing: this.#replacedBubble(run) });
    }
    this.messages.maybeLoadOlder();
    if (!this.run) this.#focusComposer();
  }

  /** Puts the caret in the prompt box once a chat is open, unless the user has meanwhile started typing in
   * another field (the search box, a rename): their keystrokes must not land in the prompt. */
  #focusComposer() {
    const active = document.activeElement;
    const typing = active && active !== this.composer.prompt
      && (active.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(active.tagName));
    if (!typing) this.composer.focus();
  }

  async send() {
    const content = this.composer.value;
    if (!content.trim() || this.sending) return;
    if (this.run) {
      this.statusLine.set("An answer is still being written: wait for it or press Stop.");
      return;
    }
    this.alerts.clear();
    this.sending = true;
    this.composer.setSending(true);
    this.statusLine.set("Sending…");
    let chatId = this.chatId;
    try {
      if (!chatId) {
        const chat = await api("POST", "/api/chats", { title: "", model: this.picker.value });
        chatId = chat.id;
        this.picker.show(chat.model);
        this.messages.adopt(chatId);
        this.settings.show(chat);
        window.history.pushState({ chatId }, "", `/c/${chatId}`);
        this.sidebar.upsert(chat, { toTop: true });
        this.sidebar.markCurrent();
      } else if (this.savingModel) {
        await this.savingModel; // the prompt goes to the model the user just picked
      }
      const accepted = await api("POST", `/api/chats/${chatId}/messages`, { content });
      if (this.chatId !== chatId) return;
      this.composer.clear();
      this.messages.append(accepted.message);
      this.startRun({ ...accepted.run, stream_url: accepted.stream_url || accepted.run.stream_url });
      this.sidebar.refresh(chatId);
      this.account.refresh();
    } catch (error) {
      if (error.status === 429) {
        this.alerts.busy(error, () => this.send());
        this.account.refresh();
      } else if (error.status === 409 && this.chatId) {
        this.alerts.error(error.message);
        const chat = await api("GET", `/api/chats/${this.chatId}`).catch(() => null);
        if (chat && chat.active_run && !this.run) this.startRun(chat.active_run);
      } else if (error.code === "content_policy_violation") {
        // The prompt is kept in the chat as refused (never answered): show it where it was stored.
        this.alerts.error(error.message);
        if (error.details.message_id && this.chatId === chatId) {
          this.composer.clear();
          this.messages.append({ id: error.details.message_id, role: "user", content, moderation: Moderation.REFUSED });
          this.sidebar.refresh(chatId);
        }
      } else {
        this.alerts.error(error.message);
        // The model went away or has no worker since the list was read: offer what there is now.
        if (error.code === "model_not_found" || error.status === 503) this.picker.load();
      }
    } finally {
      this.sending = false;
      this.composer.setSending(false);
      if (this.statusLine.text === "Sending…") this.statusLine.set("");
    }
  }

  /** The user picked `model`: a new chat is created with it when it is sent; an open chat keeps it. */
  async changeModel(model) {
    const chatId = this.chatId;
    if (!chatId) return;
    this.alerts.clear();
    this.picker.setBusy(true);
    const saving = api("PATCH", `/api/chats/${chatId}`, { model });
    const settled = saving.catch(() => null);
    this.savingModel = settled;
    try {
      const chat = await saving;
      if (this.chatId !== chatId) return;
      this.picker.show(chat.model);
      this.sidebar.upsert(chat, { onlyIfKnown: true });
    } catch (error) {
      if (this.chatId !== chatId) return;
      this.picker.revert();
      this.alerts.error(`Could not change the model: ${error.message}`);
      if (error.code === "model_not_found") this.picker.load();
    } finally {
      if (this.chatId === chatId) this.picker.setBusy(false);
      if (this.savingModel === settled) this.savingModel = null;
    }
  }

  async stop() {
    const view = this.run;
    if (!view || view.finished) return;
    this.composer.setStopping(true);
    try {
      await view.cancel();
    } catch (error) {
      this.alerts.error(`Could not stop the answer: ${error.message}`);
      this.composer.setStopping(false);
    }
  }

  /** Follows `run` (the API's run) in a new assistant bubble at the end of the conversation. `replacing`: the
   * bubble of the answer it regenerates or continues (it gives way; a continued answer's text carries on). */
  startRun(run, { replacing = null } = {}) {
    this.detachRun();
    const prefix = run.revision === "continue" && replacing ? this.actions.shownVersion(replacing)?.content : "";
    if (replacing) replacing.remove();
    const bubble = this.messages.append({ role: "assistant", content: "" });
    const view = new RunView(run, {
      bubble,
      prefix: prefix || "",
      messages: this.messages,
      statusLine: this.statusLine,
      onFinished: (finished, outcome) => this.#runFinished(finished, outcome),
    });
    this.run = view;
    this.messages.scrollToBottom();
    this.composer.setRunning(true);
    this.actions.setBusy(true);
    view.start();
  }

  /** The bubble of the stored answer `run` regenerates or continues, if it is on the page. */
  #replacedBubble(run) {
    if (!run.replaces) return null;
    return this.messages.list.querySelector(`.message-assistant[data-message-id="${Number(run.replaces)}"]`);
  }

  /** Regenerate (a new version of the last answer) or continue it (`how`: "regenerate" | "continue"). */
  async revise(li, how) {
    const chatId = this.chatId;
    if (!chatId || this.run || this.sending) return;
    this.alerts.clear();
    this.sending = true;
    this.statusLine.set(how === "continue" ? "Continuing…" : "Regenerating…");
    try {
      const run = await api("POST", `/api/chats/${chatId}/${how}`);
      if (this.chatId !== chatId) return;
      this.startRun({ revision: how, ...run }, { replacing: li });
      this.account.refresh();
    } catch (error) {
      if (error.status === 429) this.alerts.busy(error, () => this.revise(li, how));
      else this.alerts.error(error.message);
    } finally {
      this.sending = false;
      if (/…$/.test(this.statusLine.text) && !this.run) this.statusLine.set("");
    }
  }

  /** Stops following the run (another chat opened); it goes on and can be resumed later. */
  detachRun({ keepProgress = true } = {}) {
    const view = this.run;
    if (!view) return;
    view.detach({ keepProgress });
    this.run = null;
    this.actions.setBusy(false);
  }

  /** The browser is back online: reopen the run's stream. */
  reconnect() {
    if (this.run && !this.run.finished) this.run.reconnect();
  }

  /** The sidebar deleted a chat (the server cancelled its run with it). */
  chatDeleted(chatId) {
    if (this.run && this.run.chatId === chatId) this.detachRun({ keepProgress: false });
    if (this.chatId === chatId) this.open(null, { push: true });
  }

  #runFinished(view, { announcement, error }) {
    if (this.run === view) {
      this.run = null;
      this.composer.setRunning(false);
      this.statusLine.set(announcement);
      this.actions.setBusy(false);
      // The stored answer takes the bubble's place: its actions, and its earlier versions if any.
      if (view.chatId === this.chatId && !error) this.messages.replaceWithStored(view.bubble);
    }
    if (error) this.alerts.error(error);
    if (this.messages.nearBottom()) this.messages.scrollToBottom();
    this.account.refresh();
    this.sidebar.refresh(view.chatId);
  }
}
