// The chat page's entry point: builds its parts and wires them together. Plain ES modules, no build
// step. User text goes through text nodes; the model's Markdown through markdown-it and DOMPurify
// (markdown.js), re-rendered once per frame while it streams (live_markdown.js).
//
//   constants.js  run statuses, finish reasons, stream events (the server's enums)
//   dom.js        the page's elements, small DOM helpers, the run status line
//   sidebar.js    the chat list: paging, the open chat, new / rename / delete, the mobile drawer
//   messages.js   the open chat's history and message bubbles
//   run_view.js   one streaming answer: its state, transitions and bubble
//   answer_actions.js  under each answer: versions, copy, rating, regenerate, continue, model and tokens
//   composer.js   the prompt box, Send and Stop
//   model_picker.js  the model a chat uses (GET /api/models), above the prompt box
//   search.js     search across the user's chats, in the sidebar
//   chat_settings.js  the open chat's system prompt and temperature, its export links
//   memory.js     memory across chats (a dialog): the switch, adding, searching and deleting memories
//   chat_page.js  opening a chat, sending, stopping: the coordination
//   alerts.js, account.js, progress.js, api.js, stream.js, markdown.js, live_markdown.js, clipboard.js
//   theme.js      (a classic script in <head>) the light / dark / system theme toggle

import { AccountBadge } from "./account.js";
import { AlertBar } from "./alerts.js";
import { AnswerActions } from "./answer_actions.js";
import { ChatPage } from "./chat_page.js";
import { ChatSettings } from "./chat_settings.js";
import { Composer } from "./composer.js";
import { StatusLine, findElements } from "./dom.js";
import { MemoryDialog } from "./memory.js";
import { MessageList } from "./messages.js";
import { ModelPicker } from "./model_picker.js";
import { ChatSearch } from "./search.js";
import { Sidebar } from "./sidebar.js";

function chatIdFromPath() {
  const match = window.location.pathname.match(/^\/c\/(\d+)\/?$/);
  return match ? Number(match[1]) : null;
}

function init() {
  const ui = findElements();
  const alerts = new AlertBar(ui);
  const account = new AccountBadge(ui);
  const messages = new MessageList(ui);
  let page = null;
  const statusLine = new StatusLine(ui.runStatus);
  const actions = new AnswerActions(ui.messageList, {
    announce: (text) => statusLine.set(text),
    onRegenerate: (li) => page.revise(li, "regenerate"),
    onContinue: (li) => page.revise(li, "continue"),
    onError: (message) => alerts.error(message),
  });
  messages.actions = actions;
  const composer = new Composer(ui, { onSend: () => page.send(), onStop: () => page.stop() });
  const picker = new ModelPicker(ui, { onChange: (model) => page.changeModel(model) });
  const sidebar = new Sidebar(ui, {
    currentChatId: () => messages.chatId,
    onOpen: (chatId) => page.open(chatId, { push: true }),
    onNewChat: () => page.open(null, { push: true }),
    onCurrentChanged: (chat) => page.showTitle(chat),
    onDeleted: (chatId) => page.chatDeleted(chatId),
    onError: (message) => alerts.error(message),
  });
  const settings = new ChatSettings(ui, { onSaved: (chat) => sidebar.upsert(chat, { onlyIfKnown: true }) });
  new ChatSearch(ui, { onOpen: (chatId) => page.open(chatId, { push: true }) });
  new MemoryDialog(ui, { onOpenChat: (chatId) => page.open(chatId, { push: true }) });
  page = new ChatPage({
    chatTitle: ui.chatTitle,
    messages,
    sidebar,
    composer,
    picker,
    alerts,
    account,
    statusLine,
    actions,
    settings,
  });

  window.addEventListener("popstate", () => page.open(chatIdFromPath()));
  window.addEventListener("online", () => page.reconnect());
  sidebar.observe();
  messages.observe();

  account.refresh();
  picker.load();
  sidebar.loadMore();
  page.open(chatIdFromPath());
  document.body.dataset.ready = "true";
}

init();
