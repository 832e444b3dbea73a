// The model picker above the prompt box: the ready models of GET /api/models, each name (every run
// goes to one of its ready versions, by traffic weight) followed by its pinned `name@version`s, then `auto`
// (the router picks a deployment per prompt) when the listing offers it. It
// shows the open chat's model ("" is the default model: its name is shown) or, for a chat not created
// yet, the model it will be created with. Saving a change is the chat page's job (onChange).

import { api } from "./api.js";

const AUTO_MODEL = "auto"; // deployments.selection.AUTO_MODEL

export class ModelPicker {
  /** `onChange(model)`: the user picked another model. */
  constructor({ modelSelect }, { onChange }) {
    this.select = modelSelect;
    this.defaultName = "";
    this.models = []; // the listing's results
    this.auto = false; // whether `auto` (the router's choice per prompt) is offered
    this.shown = ""; // the model the picker stands for ("" = the default)
    this.busy = false;
    this.select.addEventListener("change", () => onChange(this.select.value));
  }

  /** The chosen model, as a chat's `model` takes it ("" while the list has not loaded: the default). */
  get value() {
    return this.select.value;
  }

  /** Reads the list of ready models again (at start, and after the server refused a model). */
  async load() {
    let listing;
    try {
      listing = await api("GET", "/api/models");
    } catch {
      // Nothing to choose from: chats keep their model (the server's default for new ones).
      this.#render();
      return;
    }
    this.defaultName = listing.default || "";
    this.models = listing.results;
    this.auto = Boolean(listing.auto);
    this.#render();
  }

  /** Stands for `model` (a chat's stored model; "" = the default) without saving anything. */
  show(model) {
    this.shown = model || "";
    this.#render();
  }

  /** Back to what it stood for before the user's change (the server refused it). */
  revert() {
    this.#render();
  }

  /** Disabled while a change is being saved. */
  setBusy(busy) {
    this.busy = busy;
    this.#render();
  }

  #render() {
    const options = [];
    for (const model of this.models) {
      const isDefault = model.id === this.defaultName;
      options.push(this.#option(model.id, isDefault ? `${model.id} (default)` : model.id));
      for (const version of model.versions) {
        const idle = version.ready_workers > 0 ? "" : " (no worker ready)";
        options.push(this.#option(version.id, `${version.id}${idle}`));
      }
    }
    if (this.auto) options.push(this.#option(AUTO_MODEL, "auto (the router picks per prompt)"));
    const wanted = this.shown || this.defaultName;
    if (!options.some((option) => option.value === wanted)) {
      // The chat's model is not ready right now (or the list did not load): still show what it is.
      const label = wanted ? `${wanted} (unavailable)` : "Default model";
      options.unshift(this.#option(this.shown, label));
    }
    this.select.replaceChildren(...options);
    this.select.value = options.some((option) => option.value === wanted) ? wanted : this.shown;
    this.select.disabled = this.busy || options.length < 2;
  }

  #option(value, label) {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = label;
    return option;
  }
}
