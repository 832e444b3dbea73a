// The chat page's elements (chat.html) and the small DOM helpers the other modules share.

const $ = (id) => document.getElementById(id);

/** Every element of the chat page the script uses, by role. */
export function findElements() {
  return {
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
    modelSelect: $("model-select"),
    composer: $("composer"),
    prompt: $("prompt"),
    send: $("send"),
    stop: $("stop"),
    accountTier: $("account-tier"),
    accountBudget: $("account-budget"),
    deleteDialog: $("delete-dialog"),
    deleteDialogText: $("delete-dialog-text"),
    chatSearch: $("chat-search"),
    searchResults: $("search-results"),
    searchStatus: $("search-status"),
    chatTools: $("chat-tools"),
    chatSettingsButton: $("chat-settings"),
    exportMarkdown: $("export-markdown"),
    exportJson: $("export-json"),
    settingsDialog: $("settings-dialog"),
    settingsForm: $("settings-form"),
    settingsPrompt: $("settings-prompt"),
    settingsTemperature: $("settings-temperature"),
    settingsError: $("settings-error"),
    settingsCancel: $("settings-cancel"),
    settingsSave: $("settings-save"),
    memoryButton: $("memory-button"),
    memoryDialog: $("memory-dialog"),
    memoryEnabled: $("memory-enabled"),
    memoryUnavailable: $("memory-unavailable"),
    memoryAddForm: $("memory-add-form"),
    memoryAddInput: $("memory-add-input"),
    memoryAdd: $("memory-add"),
    memoryError: $("memory-error"),
    memorySearch: $("memory-search"),
    memoryStatus: $("memory-status"),
    memoryList: $("memory-list"),
    memoryMore: $("memory-more"),
    memoryClear: $("memory-clear"),
  };
}

export function formatSeconds(total) {
  const s = Math.max(0, Math.round(total));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
}

/** Whether `element` is on screen in its scrolling `container`, or within 200 px of it. */
export function isVisibleIn(element, container) {
  const a = element.getBoundingClientRect();
  const b = container.getBoundingClientRect();
  return a.bottom >= b.top - 200 && a.top <= b.bottom + 200;
}

/** The polite live region under the conversation (#run-status): one line about the answer being written. */
export class StatusLine {
  constructor(element) {
    this.element = element;
  }

  get text() {
    return this.element.textContent;
  }

  set(text) {
    if (this.element.textContent !== text) this.element.textContent = text;
  }
}
