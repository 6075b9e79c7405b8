// "What does this token attend to?": lines from the selected query to every key (as bertviz draws
// them) beside bars with the exact weights; one head, the mean, or all heads in their own colours.

import { el, fixed } from "./format.js";

export const HEAD_COLORS = [
  "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
];
const ROW = 22; // px per token row
const MAX_ROWS = 64; // beyond this many keys only the largest are listed: 512 rows help nobody and cost a click

// How special tokens (the usual attention sinks) are shown: all, hidden, or hidden with the rest
// rescaled to sum to 1. Whatever is hidden is drawn as its own "sink" bar, never silently dropped.
export const SINK_MODES = { show: "show all", hide: "hide [CLS]/[SEP]", renormalise: "hide and renormalise" };

// A weight row with [CLS]/[SEP] removed (and, to renormalise, rescaled); `sink` is what was removed.
export function withoutSpecial(row, tokens, renormalise) {
  const kept = Array.from(row, (weight, index) => (tokens[index].special ? 0 : weight));
  const total = kept.reduce((sum, weight) => sum + weight, 0);
  const scale = renormalise && total > 0 ? 1 / total : 1;
  return { row: kept.map((weight) => weight * scale), sink: 1 - total };
}

// rows: [{head, color, row}] with row = weights of the selected query over all keys; sinks: a SINK_MODES key.
// segments: a segment rule (segments.js) or null: with one, only the rule's keys are listed.
export function renderAttends(container, { tokens, selected, rows, sinks: mode, segments = null, caption }) {
  const hideSpecial = mode !== "show";
  if (segments && selected !== null && tokens[selected].segment !== segments.from) {
    container.replaceChildren(
      el("p", { class: "hint" }, `The ${segments.from} → ${segments.to} filter shows queries in segment ${segments.from}: select one of its tokens.`),
    );
    return;
  }
  if (selected === null) {
    container.replaceChildren(el("p", { class: "hint" }, "Select a token to see where it looks."));
    return;
  }
  const shown = rows.map(({ head, color, row }) => {
    if (!hideSpecial) return { head, color, row: Array.from(row), sink: 0 };
    return { head, color, ...withoutSpecial(row, tokens, mode === "renormalise") };
  });
  const candidates = tokens.filter((token) => !(hideSpecial && token.special) && (!segments || token.segment === segments.to));
  const strength = (token) => Math.max(...shown.map(({ row }) => row[token.index]));
  const keys =
    candidates.length <= MAX_ROWS
      ? candidates
      : [...candidates].sort((a, b) => strength(b) - strength(a)).slice(0, MAX_ROWS).sort((a, b) => a.index - b.index);
  // A long text lists only the selected query on the left, at the top where it stays in sight.
  const queries = tokens.length <= MAX_ROWS ? tokens : [tokens[selected]];
  const queryRow = tokens.length <= MAX_ROWS ? selected : 0;
  const height = Math.max(keys.length, queries.length, 1) * ROW;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "attend-lines");
  svg.setAttribute("viewBox", `0 0 100 ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("aria-hidden", "true");
  svg.style.height = `${height}px`;
  const largest = Math.max(...shown.flatMap(({ row }) => row), 1e-9);
  for (const { color, row } of shown) {
    keys.forEach((token, position) => {
      const weight = row[token.index];
      if (weight < 0.005) return;
      const line = document.createElementNS("http://www.w3.org/2000/svg", "line");
      line.setAttribute("x1", "0");
      line.setAttribute("y1", String(queryRow * ROW + ROW / 2));
      line.setAttribute("x2", "100");
      line.setAttribute("y2", String(position * ROW + ROW / 2));
      line.setAttribute("stroke", color);
      line.setAttribute("stroke-opacity", String(Math.min(1, 0.15 + weight / largest)));
      line.setAttribute("stroke-width", String(0.5 + 5 * (weight / largest)));
      line.setAttribute("vector-effect", "non-scaling-stroke");
      svg.append(line);
    });
  }
  const left = el(
    "ol",
    { class: "attend-queries" },
    ...queries.map((token) =>
      el("li", { class: `${token.index === selected ? "selected" : ""}${token.special ? " special" : ""}` }, token.text),
    ),
  );
  const right = el(
    "ol",
    { class: "attend-keys", style: `height:${height}px` },
    ...keys.map((token) => {
      const bars = shown.map(({ head, color, row }) =>
        el("span", {
          class: "bar",
          title: `${head}: ${fixed(row[token.index])}`,
          style: `width:${(100 * row[token.index]) / largest / shown.length}%;background:${color}`,
        }),
      );
      const single = shown.length === 1 ? shown[0].row[token.index] : null;
      return el(
        "li",
        {
          class: `attend-row${token.special ? " special" : ""}`,
          dataset: { index: String(token.index), ...(single === null ? {} : { weight: String(single) }) },
        },
        el("span", { class: "attend-token" }, token.text),
        el("span", { class: "bars" }, ...bars),
        single === null ? null : el("span", { class: "attend-weight" }, fixed(single)),
      );
    }),
  );
  const sinks = hideSpecial ? sinkBars(shown, mode, largest) : null;
  const limited =
    keys.length < candidates.length
      ? el("p", { class: "hint" }, `The ${keys.length} most attended of ${candidates.length} tokens, in text order.`)
      : null;
  const legend =
    shown.length > 1
      ? el("p", { class: "legend" }, ...shown.map(({ head, color }) => el("span", { class: "legend-item", style: `--c:${color}` }, head)))
      : null;
  container.replaceChildren(
    ...[el("p", { class: "caption" }, caption), limited, legend, el("div", { class: "attend-grid" }, left, svg, right), sinks].filter(Boolean),
  );
}

// The weight taken off [CLS]/[SEP], one bar per head shown, on the same scale as the key bars.
function sinkBars(shown, mode, largest) {
  return el(
    "div",
    { class: "sink", dataset: { field: "sink" } },
    el("span", { class: "attend-token" }, "sink: [CLS] + [SEP]"),
    el(
      "span",
      { class: "bars" },
      ...shown.map(({ head, color, sink }) =>
        el("span", { class: "bar sink-bar", title: `${head}: ${fixed(sink)}`, style: `width:${Math.min(100, (100 * sink) / largest / shown.length)}%;--c:${color}` }),
      ),
    ),
    el(
      "span",
      { class: "attend-weight", dataset: { value: String(shown[0].sink) } },
      shown.length === 1 ? fixed(shown[0].sink) : "",
    ),
    el("p", { class: "hint" }, mode === "renormalise" ? "Hidden, and the other weights rescaled to sum to 1." : "Hidden; the other weights are as the model gave them."),
  );
}
