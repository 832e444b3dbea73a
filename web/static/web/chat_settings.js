// The open chat's settings (a dialog: its system prompt and temperature, PATCH /api/chats/{id}) and its
// export links (GET /api/chats/{id}/export?format=markdown|json), in the bar above the conversation.

import { api } from "./api.js";

export const MAX_SYSTEM_PROMPT = 4000;

export class ChatSettings {
  /** `onSaved(chat)`: the server took the new settings. */
  constructor(ui, { onSaved }) {
    this.ui = ui;
    this.onSaved = onSaved;
    this.chat = null;
    ui.chatSettingsButton.addEventListener("click", () => this.openDialog());
    ui.settingsForm.addEventListener("submit", (event) => {
      event.preventDefault();
      this.save();
    });
    ui.settingsCancel.addEventListener("click", () => ui.settingsDialog.close());
    ui.settingsPrompt.maxLength = MAX_SYSTEM_PROMPT;
  }

  /** The chat shown (null: a new chat, which has no settings or export yet). */
  show(chat) {
    this.chat = chat;
    this.ui.chatTools.hidden = !chat;
    if (!chat) return;
    this.ui.exportMarkdown.href = `/api/chats/${chat.id}/export?format=markdown`;
    this.ui.exportJson.href = `/api/chats/${chat.id}/export?format=json`;
  }

  openDialog() {
    const { ui, chat } = this;
    if (!chat) return;
    ui.settingsPrompt.value = chat.system_prompt || "";
    ui.settingsTemperature.value = chat.temperature === null || chat.temperature === undefined ? "" : String(chat.temperature);
    ui.settingsError.textContent = "";
    ui.settingsDialog.showModal();
    ui.settingsPrompt.focus();
  }

  async save() {
    const { ui, chat } = this;
    const raw = ui.settingsTemperature.value.trim();
    const temperature = raw === "" ? null : Number(raw);
    if (temperature !== null && !(temperature >= 0 && temperature <= 2)) {
      ui.settingsError.textContent = "Temperature is a number from 0 to 2, or empty for the default.";
      ui.settingsTemperature.focus();
      return;
    }
    ui.settingsSave.disabled = true;
    try {
      const saved = await api("PATCH", `/api/chats/${chat.id}`, { system_prompt: ui.settingsPrompt.value, temperature });
      this.chat = { ...chat, ...saved };
      ui.settingsDialog.close();
      this.onSaved(this.chat);
    } catch (error) {
      ui.settingsError.textContent = error.message;
    } finally {
      ui.settingsSave.disabled = false;
    }
  }
}
