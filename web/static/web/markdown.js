// A small, safe Markdown renderer.
//
// Safety comes from construction, not from sanitising: the text is never parsed as HTML. Every piece of
// model output or user input ends up in a Text node (createTextNode / textContent), and the only elements
// created are the fixed ones below. Links keep only http(s) and mailto URLs. So `<script>`, `<img onerror>`
// and friends are shown literally and can never run.
//
// Subset: fenced code blocks (``` even while still open during streaming), headings, block quotes,
// bullet and numbered lists, horizontal rules, paragraphs with line breaks, and inline `code`,
// **bold**, *italic* / _italic_, ~~strike~~ and [links](https://...).

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const BULLET = /^(\s*)[-*+]\s+(.*)$/;
const NUMBERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const SAFE_URL = /^(https?:\/\/|mailto:)/i;

function el(tag, children = [], attrs = {}) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
}

function isBlockStart(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)
    || BULLET.test(line) || NUMBERED.test(line);
}

// Inline: one left-to-right scan; the earliest match wins, unmatched markers stay as text.
const INLINE = [
  { name: "code", re: /(`+)([\s\S]*?[^`])\1(?!`)/y },
  { name: "strong", re: /\*\*(?=\S)([\s\S]*?\S)\*\*/y },
  { name: "strong", re: /__(?=\S)([\s\S]*?\S)__(?![\w])/y },
  { name: "em", re: /\*(?=[^\s*])([\s\S]*?[^\s*])\*/y },
  { name: "em", re: /(?<![\w])_(?=[^\s_])([\s\S]*?[^\s_])_(?![\w])/y },
  { name: "del", re: /~~(?=\S)([\s\S]*?\S)~~/y },
  { name: "link", re: /\[([^\]\n]+)\]\(\s*([^\s)]+)\s*\)/y },
];
const INLINE_START = /[`*_~[]/g;

export function renderInline(text) {
  const out = [];
  let plainFrom = 0;
  INLINE_START.lastIndex = 0;
  let m;
  while ((m = INLINE_START.exec(text)) !== null) {
    const at = m.index;
    let matched = null;
    for (const rule of INLINE) {
      rule.re.lastIndex = at;
      const hit = rule.re.exec(text);
      if (hit) { matched = { rule, hit }; break; }
    }
    if (!matched) continue;
    if (at > plainFrom) out.push(document.createTextNode(text.slice(plainFrom, at)));
    const { rule, hit } = matched;
    if (rule.name === "code") {
      out.push(el("code", [document.createTextNode(hit[2].replace(/^ (.*) $/s, "$1"))]));
    } else if (rule.name === "link") {
      const url = hit[2];
      if (SAFE_URL.test(url)) {
        const a = el("a", renderInline(hit[1]), { rel: "noopener noreferrer nofollow", target: "_blank" });
        a.href = url;
        out.push(a);
      } else {
        out.push(document.createTextNode(hit[0]));
      }
    } else {
      out.push(el(rule.name, renderInline(hit[1])));
    }
    plainFrom = at + hit[0].length;
    INLINE_START.lastIndex = plainFrom;
  }
  if (plainFrom < text.length) out.push(document.createTextNode(text.slice(plainFrom)));
  return out;
}

function linesWithBreaks(lines) {
  const nodes = [];
  lines.forEach((line, i) => {
    if (i > 0) nodes.push(el("br"));
    nodes.push(...renderInline(line));
  });
  return nodes;
}

function parseList(lines, start, ordered) {
  const pattern = ordered ? NUMBERED : BULLET;
  const first = lines[start].match(pattern);
  const list = el(ordered ? "ol" : "ul");
  if (ordered && first[2] !== "1") list.setAttribute("start", String(Number(first[2])));
  let i = start;
  let item = null;
  while (i < lines.length) {
    const line = lines[i];
    const m = line.match(pattern);
    if (m) {
      item = [ordered ? m[3] : m[2]];
      list.append(el("li", []));
      list.lastChild.itemLines = item;
      i += 1;
    } else if (line.trim() !== "" && /^\s+\S/.test(line) && item) {
      item.push(line.trim());
      i += 1;
    } else {
      break;
    }
  }
  for (const li of list.children) {
    li.append(...linesWithBreaks(li.itemLines));
    delete li.itemLines;
  }
  return [list, i];
}

export function parseBlocks(text) {
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === "") { i += 1; continue; }
    const fence = line.match(FENCE);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !(lines[i].trim().startsWith(fence[1]) && lines[i].trim().replace(/[`~]/g, "") === "")) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1; // the closing fence (or past the end while the block is still streaming)
      const code = el("code", [document.createTextNode(body.join("\n"))]);
      if (fence[2]) code.className = `language-${fence[2]}`;
      blocks.push(el("pre", [code]));
      continue;
    }
    const heading = line.match(HEADING);
    if (heading) {
      const level = Math.min(heading[1].length + 2, 6); // the page owns h1/h2
      blocks.push(el(`h${level}`, renderInline(heading[2])));
      i += 1;
      continue;
    }
    if (RULE.test(line)) { blocks.push(el("hr")); i += 1; continue; }
    if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && QUOTE.test(lines[i])) { inner.push(lines[i].match(QUOTE)[1]); i += 1; }
      blocks.push(el("blockquote", parseBlocks(inner.join("\n"))));
      continue;
    }
    if (BULLET.test(line) || NUMBERED.test(line)) {
      const [list, next] = parseList(lines, i, !BULLET.test(line));
      blocks.push(list);
      i = next;
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() !== "" && (para.length === 0 || !isBlockStart(lines[i]))) {
      para.push(lines[i]);
      i += 1;
    }
    blocks.push(el("p", linesWithBreaks(para)));
  }
  return blocks;
}

/** Replaces the children of `target` with `text` rendered as Markdown (text nodes only; see above). */
export function renderMarkdown(target, text) {
  target.replaceChildren(...parseBlocks(text));
}
