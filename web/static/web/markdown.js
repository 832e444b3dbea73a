// Markdown to safe DOM: markdown-it parses, highlight.js colours code, DOMPurify sanitizes, all vendored
// (vendor/manifest.json, scripts/vendor_js.py).
//
// Safety, in layers: markdown-it runs with `html: false`, so HTML in the model's text (`<script>`,
// `<img onerror>`, `<svg onload>`) stays literal text; its link check refuses `javascript:`, `vbscript:`,
// `file:` and `data:` URLs. Everything it renders then goes through DOMPurify, which keeps only http(s),
// mailto and #fragment URLs, drops every event attribute, style and form element, and images (a Markdown
// image becomes a link to it: no request leaves the page on its own). The page's CSP forbids inline
// script on top of that.

import MarkdownIt from "./vendor/markdown-it.esm.min.mjs";
import DOMPurify from "./vendor/purify.es.mjs";
import hljs from "./vendor/highlight.min.js";

const MAX_HIGHLIGHT_CHARS = 20000; // a bigger block is shown plain: colouring it would cost a frame

function highlight(code, lang) {
  const language = (lang || "").toLowerCase();
  if (!language || code.length > MAX_HIGHLIGHT_CHARS || !hljs.getLanguage(language)) return "";
  try {
    return hljs.highlight(code, { language, ignoreIllegals: true }).value;
  } catch {
    return ""; // markdown-it escapes the code itself
  }
}

export const md = new MarkdownIt({ html: false, linkify: true, typographer: false, highlight });

// The page owns h1 and h2: the answer's headings start at h3.
md.renderer.rules.heading_open = (tokens, idx) => `<h${Math.min(Number(tokens[idx].tag.slice(1)) + 2, 6)}>`;
md.renderer.rules.heading_close = (tokens, idx) => `</h${Math.min(Number(tokens[idx].tag.slice(1)) + 2, 6)}>`;
// An image is shown as a link to it.
md.renderer.rules.image = (tokens, idx, options, env, self) => {
  const token = tokens[idx];
  const alt = self.renderInlineAsText(token.children, options, env) || token.attrGet("src");
  return `<a href="${md.utils.escapeHtml(token.attrGet("src"))}">${md.utils.escapeHtml(alt)}</a>`;
};

const PURIFY = {
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
  FORBID_TAGS: ["img", "svg", "math", "style", "form", "input", "button", "textarea", "select", "iframe", "video", "audio"],
  FORBID_ATTR: ["style", "id", "name"],
  RETURN_DOM_FRAGMENT: true,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    if (!node.getAttribute("href").startsWith("#")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer nofollow");
    }
  }
});

/** `html` (markdown-it's output) as a sanitized DocumentFragment. */
export function sanitize(html) {
  return DOMPurify.sanitize(html, PURIFY);
}

/** A code block's frame: its language and a copy button above the `<pre>` (the page's own elements). */
function frameCodeBlock(pre) {
  const code = pre.querySelector("code");
  const match = code && /(?:^|\s)language-([\w+#.-]+)/.exec(code.className);
  const frame = document.createElement("div");
  frame.className = "code-block";
  const header = document.createElement("div");
  header.className = "code-header";
  const label = document.createElement("span");
  label.className = "code-lang";
  label.textContent = match ? match[1] : "text";
  const copy = document.createElement("button");
  copy.type = "button";
  copy.className = "copy-code ghost";
  copy.textContent = "Copy code";
  header.append(label, copy);
  pre.replaceWith(frame);
  frame.append(header, pre);
  return frame;
}

/** Sanitized nodes for `html`, with its code blocks framed. */
export function toNodes(html) {
  const fragment = sanitize(html);
  for (const pre of Array.from(fragment.querySelectorAll("pre"))) frameCodeBlock(pre);
  return Array.from(fragment.childNodes).filter((node) => node.nodeType === Node.ELEMENT_NODE);
}

/** Replaces the children of `target` with `text` rendered (for whole, finished messages). */
export function renderMarkdown(target, text) {
  target.replaceChildren(...toNodes(md.render(text || "")));
}

function endsWithBlankLine(text, offset) {
  return /(?:^|\n)[ \t]*\n$/.test(text.slice(Math.max(0, offset - 200), offset));
}

/**
 * `text` as its top-level blocks, `{ text, blocks: [{ source, html, offset }], references }`, re-using what it
 * can of `previous` (the result for an earlier text):
 * - the blocks before the last two are kept without parsing them again when the text up to the next one is
 *   unchanged and a blank line precedes it: parsing from a top-level block that follows a blank line gives
 *   the same blocks as parsing the whole text (reference definitions aside: with any, all is parsed);
 * - a block parsed again whose source is the same at the same place keeps its html.
 * So a streaming answer costs about the size of its last blocks per render, not its whole length.
 */
export function renderBlocks(text, previous = { text: "", blocks: [], references: false }) {
  let keep = previous.references ? 0 : Math.max(0, previous.blocks.length - 2);
  while (keep > 0) {
    const { offset } = previous.blocks[keep];
    if (endsWithBlankLine(text, offset) && text.startsWith(previous.text.slice(0, offset))) break;
    keep -= 1;
  }
  const base = keep ? previous.blocks[keep].offset : 0;
  const tail = text.slice(base);
  const env = {};
  const tokens = md.parse(tail, env);
  const references = Boolean(env.references && Object.keys(env.references).length);
  if (references && keep) return renderBlocks(text, { text: "", blocks: [], references: true });
  const lines = tail.split("\n");
  const lineStarts = [0];
  for (const line of lines) lineStarts.push(lineStarts[lineStarts.length - 1] + line.length + 1);
  const blocks = previous.blocks.slice(0, keep);
  let start = 0;
  let depth = 0;
  for (let i = 0; i < tokens.length; i += 1) {
    depth += tokens[i].nesting;
    if (depth !== 0) continue;
    const group = tokens.slice(start, i + 1);
    start = i + 1;
    const map = group[0].map || [0, 0];
    const source = lines.slice(map[0], map[1]).join("\n");
    const old = references ? null : previous.blocks[blocks.length];
    const html = old && old.source === source ? old.html : md.renderer.render(group, md.options, env);
    blocks.push({ source, html, offset: base + lineStarts[map[0]] });
  }
  return { text, blocks, references };
}

// highlight.js compiles a language's grammar on its first use, which can cost a frame in the middle of a
// streaming answer: compile the common ones while the page is idle.
const WARM_LANGUAGES = ["python", "javascript", "typescript", "bash", "json", "html", "css", "sql", "java", "go", "rust", "cpp"];
function warmUp(deadline) {
  while (WARM_LANGUAGES.length && (!deadline || deadline.timeRemaining() > 5)) highlight("x", WARM_LANGUAGES.shift());
  if (WARM_LANGUAGES.length) schedule();
}
function schedule() {
  if (window.requestIdleCallback) window.requestIdleCallback(warmUp, { timeout: 5000 });
  else setTimeout(() => warmUp(null), 200);
}
schedule();
