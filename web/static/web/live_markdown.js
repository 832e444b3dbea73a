// A streaming answer's Markdown, re-rendered at most once per animation frame and only where it changed:
// each frame parses the whole text (cheap), then renders, sanitizes and swaps in only the top-level blocks
// whose source changed (while an answer streams, that is its last block or two). A text with reference
// definitions (`[x]: url`, which change blocks above them) is rendered whole each time.

import { renderBlocks, toNodes } from "./markdown.js";

/** How long the renders took, for the frame-time bench (bench/ui_frame_time.py) and the browser test;
 * `samples` keeps each render's milliseconds only while the bench sets it to an array. */
export const renderStats = { renders: 0, totalMs: 0, maxMs: 0, samples: null };

export class LiveMarkdown {
  #target;
  #text = "";
  #rendered = { text: "", blocks: [], references: false }; // renderBlocks' result, each block with its nodes
  #queued = false;
  #done = false;
  #onRender;

  /** `target`: the element the Markdown fills. `onRender()`: after each render (the page keeps its scroll). */
  constructor(target, { onRender = () => {} } = {}) {
    this.#target = target;
    this.#onRender = onRender;
  }

  get text() {
    return this.#text;
  }

  /** The text so far; shown on the next animation frame (a hidden tab: within 100 ms). */
  set(text) {
    if (this.#done || text === this.#text) return;
    this.#text = text;
    if (this.#queued) return;
    this.#queued = true;
    if (document.hidden) setTimeout(() => this.#render(), 100);
    else requestAnimationFrame(() => this.#render());
  }

  /** Renders now (the text is shown at once after a reload). */
  flush() {
    this.#render();
  }

  /** The final text: rendered now (what is unchanged stays), and the view stops changing. */
  finish(text = this.#text) {
    this.#text = text;
    this.#render();
    this.#done = true;
  }

  #render() {
    this.#queued = false;
    if (this.#done) return;
    const started = performance.now();
    const previous = this.#rendered;
    const rendered = renderBlocks(this.#text, previous);
    const { blocks } = rendered;
    let anchor = null; // the first node of the next block, already in place
    for (let i = blocks.length - 1; i >= 0; i -= 1) {
      const old = previous.blocks[i];
      if (old && old.html === blocks[i].html) {
        blocks[i].nodes = old.nodes;
      } else {
        blocks[i].nodes = toNodes(blocks[i].html);
        if (old) for (const node of old.nodes) node.remove();
        for (const node of blocks[i].nodes) this.#target.insertBefore(node, anchor);
      }
      if (blocks[i].nodes.length) anchor = blocks[i].nodes[0];
    }
    for (const old of previous.blocks.slice(blocks.length)) for (const node of old.nodes) node.remove();
    this.#rendered = rendered;
    const took = performance.now() - started;
    renderStats.renders += 1;
    renderStats.totalMs += took;
    renderStats.maxMs = Math.max(renderStats.maxMs, took);
    if (renderStats.samples) renderStats.samples.push(took);
    this.#onRender();
  }
}
