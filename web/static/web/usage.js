// The usage page (/usage/): GET /api/usage as the tier's limits, the token buckets (what is left, the
// refill rate and when each is full again), tokens per day and the last refusals with their reasons.

import { api } from "./api.js";
import { formatSeconds } from "./dom.js";

const $ = (id) => document.getElementById(id);
const number = (value) => (Number.isFinite(value) ? Math.round(value).toLocaleString() : "–");

function cell(text, tag = "td") {
  const td = document.createElement(tag);
  td.textContent = text;
  return td;
}

function humanize(key) {
  const words = key.replace(/_/g, " ").replace(/\bper s\b/, "per second");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

function showTier(tier) {
  const rows = [];
  for (const [key, value] of Object.entries(tier || {})) {
    if (value !== null && typeof value === "object") continue;
    const dt = document.createElement("dt");
    dt.textContent = humanize(key);
    const dd = document.createElement("dd");
    dd.textContent = typeof value === "number" ? value.toLocaleString() : String(value);
    rows.push(dt, dd);
  }
  $("tier-limits").replaceChildren(...rows);
}

function refillText(bucket, now) {
  if (!bucket.full_at) return "full";
  const wait = (Date.parse(bucket.full_at) - now) / 1000;
  if (!Number.isFinite(wait) || wait <= 0) return "full";
  return `full again in ${formatSeconds(wait)} (${new Date(bucket.full_at).toLocaleTimeString()})`;
}

function showBuckets(buckets) {
  const now = Date.now();
  const items = (buckets || []).map((bucket) => {
    const box = document.createElement("div");
    box.className = "bucket";
    box.dataset.bucket = bucket.name;
    const label = document.createElement("p");
    label.className = "bucket-name";
    label.id = `bucket-${bucket.name}`;
    label.textContent = humanize(bucket.name);
    const meter = document.createElement("meter");
    meter.min = 0;
    meter.max = bucket.capacity;
    meter.value = bucket.available;
    meter.setAttribute("aria-labelledby", label.id);
    const text = document.createElement("p");
    text.className = "bucket-text";
    if (Number.isFinite(bucket.refill_per_second)) {
      text.textContent = `${number(bucket.available)} of ${number(bucket.capacity)} tokens left · refills `
        + `${bucket.refill_per_second.toLocaleString()} per second · ${refillText(bucket, now)}`;
    } else {
      // A count, not a budget (concurrent answers): a place frees when an answer ends.
      text.textContent = `${number(bucket.available)} of ${number(bucket.capacity)} free`;
    }
    box.append(label, meter, text);
    return box;
  });
  if (!items.length) items.push(cell("No token bucket applies to you.", "p"));
  $("buckets").replaceChildren(...items);
}

function showDaily(daily) {
  const days = daily || [];
  const most = Math.max(1, ...days.map((d) => d.input_tokens + d.output_tokens));
  const rows = days.map((day) => {
    const tr = document.createElement("tr");
    const total = day.input_tokens + day.output_tokens;
    const bar = document.createElement("span");
    bar.className = "day-bar";
    bar.style.width = `${Math.round((100 * total) / most)}%`; // CSSOM, which the CSP allows
    const barCell = document.createElement("td");
    barCell.className = "day-bar-cell";
    barCell.append(bar);
    tr.append(cell(day.date, "th"), cell(number(day.input_tokens)), cell(number(day.output_tokens)), cell(number(day.runs)), barCell);
    tr.firstChild.scope = "row";
    return tr;
  });
  if (!rows.length) {
    const tr = document.createElement("tr");
    const td = cell("No answers yet.");
    td.colSpan = 5;
    tr.append(td);
    rows.push(tr);
  }
  $("daily").tBodies[0].replaceChildren(...rows);
}

function showRejections(rejections) {
  const rows = (rejections || []).map((r) => {
    const tr = document.createElement("tr");
    tr.append(cell(new Date(r.at).toLocaleString()), cell(String(r.status)), cell(r.code || ""), cell(r.reason || ""));
    return tr;
  });
  if (!rows.length) {
    const tr = document.createElement("tr");
    const td = cell("None: nothing was refused lately.");
    td.colSpan = 4;
    tr.append(td);
    rows.push(tr);
  }
  $("rejections").tBodies[0].replaceChildren(...rows);
}

async function load() {
  const status = $("usage-status");
  try {
    const usage = await api("GET", "/api/usage");
    showTier(usage.tier);
    showBuckets(usage.buckets);
    showDaily(usage.daily);
    showRejections(usage.rejections);
    status.textContent = `Updated ${new Date().toLocaleTimeString()}.`;
  } catch (error) {
    status.textContent = `Could not load your usage: ${error.message}`;
  }
  document.body.dataset.ready = "true";
}

load();
