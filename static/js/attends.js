// "What does this token attend to?": lines from the selected query to every key (as bertviz draws
// them) beside bars with the exact values of the view's measure; one head, the mean, or all heads in
// their own colours.

import { blankNote, revealedKey } from "./blind.js";
import { HEAD_COLORS, rgb, sequential } from "./colors.js";
import { el, fixed } from "./format.js";
import { isSink, meanRow, segmentRule, sinkNames, viewName } from "./matrix.js";
import { measureOf } from "./measures.js";
import { byId } from "./root.js";
import { queries } from "./selection.js";

const MAX_ROWS = 64; // beyond this many keys only the largest are listed: 512 rows help nobody and cost a click

// The lines from a query to the keys it reads, as bertviz draws them, between the list of queries and the list of
// keys: drawn in rows (one unit a row) and stretched to the lists' height, whatever lab.css makes a row. lines:
// [{from, to, value, color}], from a query's row to a key's row, each as wide and opaque as its share of `largest`.
export function attendLines(rowCount, lines, largest) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "attend-lines");
  svg.setAttribute("viewBox", `0 0 100 ${rowCount}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("aria-hidden", "true");
  svg.style.height = `calc(${rowCount} * var(--attend-row))`;
  for (const { from, to, value, color } of lines) {
    const line = document.createElementNS("http://www.w3.org/2000/svg", "line");
    for (const [name, at] of Object.entries({ x1: 0, y1: from + 0.5, x2: 100, y2: to + 0.5 })) line.setAttribute(name, String(at));
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-opacity", String(Math.min(1, 0.15 + value / largest)));
    line.setAttribute("stroke-width", String(0.5 + 5 * (value / largest)));
    line.setAttribute("vector-effect", "non-scaling-stroke");
    svg.append(line);
  }
  return svg;
}

// The rows the view draws: for each head shown, the mean of the selected queries' rows of the view's
// matrix (matrix.js: the same numbers the heatmap draws; a long run's rows fetched alone, data.js), and
// their sink.
async function attendRows(state, lab) {
  const chosen = queries(state);
  const n = state.run.tokens.length;
  const views = everyHead(state)
    ? HEAD_COLORS.slice(0, lab.model.heads).map((color, head) => ({ name: `head ${head}`, color, view: { ...state, head } }))
    : [{ name: state.head === "mean" ? "mean" : `head ${state.head}`, color: state.head === "mean" ? "currentColor" : HEAD_COLORS[state.head % HEAD_COLORS.length], view: state }];
  return Promise.all(
    views.map(async ({ name, color, view }) => {
      const rows = await Promise.all(chosen.map((query) => lab.numbers().row(view, state.run.tokens, lab.model.layers, query)));
      const stacked = new Float32Array(rows.length * n);
      rows.forEach(({ row }, index) => stacked.set(row, index * n));
      const sink = rows[0].sink === null ? null : rows.reduce((sum, { sink: value }) => sum + value, 0) / rows.length;
      return { head: name, color, row: meanRow(stacked, n, rows.map((_, index) => index)), sink };
    }),
  );
}

// Every head in its own colour, where the measure has heads (ALTI has one picture per block).
function everyHead(state) {
  return state.allHeads && !measureOf(state.measure).per_block;
}

function caption(state, chosen, model) {
  const { run } = state;
  const token = chosen[0];
  const who =
    chosen.length > 1
      ? `${chosen.length} tokens (${chosen.map((index) => `“${run.tokens[index].label}”`).join(", ")}), rows averaged,`
      : `“${run.tokens[token].label}” (token ${token})${state.preview !== null ? " (preview: click to lock)" : ""}`;
  const where = everyHead(state) ? viewName({ ...state, head: 0 }, model).replace(/head 0$/, "every head") : viewName(state, model);
  // What the lines and bars are: presentation mode leaves it to the teacher's words (lab.css), so that the
  // rows keep the room.
  const how = el("span", { class: "caption-how" }, `: line width and bar length show the ${measureOf(state.measure, state.sinks).name} on each token.`);
  return el("p", { class: "caption" }, `${who} in ${where}`, how);
}

export const attendsView = {
  id: "attends",
  follows: ["run", "layer", "head", "heads", "blockMean", "token", "also", "preview", "sinks", "segments", "allHeads", "measure", "question"],
  load: (state, lab) => (queries(state).length ? attendRows(state, lab) : []),
  render(state, rows, lab) {
    const chosen = queries(state);
    renderAttends(byId("attends"), {
      tokens: state.run.tokens,
      selected: chosen[0] ?? null,
      rows,
      sinks: state.sinks,
      segments: segmentRule(state.segments),
      caption: chosen.length ? caption(state, chosen, lab.model) : null,
      answer: revealedKey(state),
      measure: measureOf(state.measure, state.sinks),
    });
  },
  blank: blankNote("attends"),
};

// rows: [{head, color, row, sink}] with row = the view's values of the selected query over all keys (NaN
// where the view leaves a key out) and sink = the value on the hidden sink tokens, or null. measure: what
// the values are (measures.js). segments: a segment rule (matrix.js) or null: with one, only queries of its
// first segment have a row. answer: a key outlined as a class question's revealed answer, or null. caption:
// the element that says whose row it is and in which view.
// Both columns list the same tokens in the same order, line by line: a key the view leaves out is listed
// as left out (hidden, or outside the segment filter), never dropped from one side only. A long text lists
// its most attended keys and, on the left, the query alone, at the top where it stays in sight. Every bar
// starts at one baseline, so lengths compare by eye.
export function renderAttends(container, { tokens, selected, rows, sinks: mode, segments = null, caption, answer = null, measure }) {
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
  const shown = rows.map(({ head, color, row, sink }) => ({ head, color, row: Array.from(row, (value) => (Number.isNaN(value) ? 0 : value)), sink }));
  const kept = (token) => !Number.isNaN(rows[0].row[token.index]);
  const candidates = tokens.filter(kept);
  const strength = (token) => Math.max(...shown.map(({ row }) => row[token.index]));
  const long = tokens.length > MAX_ROWS;
  const listed = long ? [...candidates].sort((a, b) => strength(b) - strength(a)).slice(0, MAX_ROWS).sort((a, b) => a.index - b.index) : tokens;
  const queries = long ? [tokens[selected]] : listed;
  const queryRow = long ? 0 : selected;
  const largest = Math.max(...shown.flatMap(({ row }) => row), 1e-9);
  const lines = shown.flatMap(({ color, row }) =>
    listed.flatMap((token, position) => {
      const value = row[token.index];
      return !kept(token) || value < 0.005 * largest ? [] : [{ from: queryRow, to: position, value, color }];
    }),
  );
  const svg = attendLines(Math.max(listed.length, 1), lines, largest);
  const left = el(
    "ol",
    { class: "attend-queries" },
    ...queries.map((token) =>
      el("li", { class: `${token.index === selected ? "selected" : ""}${token.special ? " special" : ""}`, dataset: { index: String(token.index) } }, token.label),
    ),
  );
  const why = (token) => (mode !== "show" && isSink(token) ? "hidden" : segments ? `outside ${segments.from} → ${segments.to}` : "left out");
  const right = el(
    "ol",
    { class: "attend-keys" },
    ...listed.map((token) => {
      if (!kept(token)) {
        return el(
          "li",
          { class: `attend-hidden${token.special ? " special" : ""}`, dataset: { index: String(token.index) }, title: `“${token.label}” is left out of this view` },
          el("span", { class: "attend-token" }, token.label),
          el("span", { class: "attend-why" }, why(token)),
        );
      }
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
          class: `attend-row${token.special ? " special" : ""}${token.index === answer ? " answer" : ""}`,
          dataset: { index: String(token.index), ...(single === null ? {} : { weight: String(single) }) },
          title: `${measure.name}: ${single === null ? "one bar per head" : fixed(single)}`,
        },
        el("span", { class: "attend-token" }, token.label),
        el("span", { class: "bars" }, ...bars),
        el("span", { class: "attend-weight" }, single === null ? "" : fixed(single)),
      );
    }),
    mode !== "show" ? sinkRow(shown, tokens, largest, measure) : null,
  );
  const limited = long ? el("p", { class: "hint" }, `The ${listed.length} most attended of ${candidates.length} tokens, in text order.`) : null;
  const strips = long ? wholeRows(shown, selected, tokens.length, largest, measure) : null;
  const legend =
    shown.length > 1
      ? el("p", { class: "legend" }, ...shown.map(({ head, color }) => el("span", { class: "legend-item", style: `--c:${color}` }, head)))
      : null;
  const hint = mode !== "show" ? sinkHint(tokens, mode, segments, rows[0].row, measure) : null;
  container.replaceChildren(
    ...[caption, limited, strips, legend, el("div", { class: "attend-grid" }, left, svg, right), hint].filter(Boolean),
  );
  // The query's line in sight: the view scrolls itself (never the page) when the query is below its fold.
  const line = left.querySelector(".selected");
  const [box, at] = [container.getBoundingClientRect(), line.getBoundingClientRect()];
  if (at.bottom > box.bottom || at.top < box.top) container.scrollTop += at.top - box.top - box.height / 3;
}

const STRIP_PX = 12; // a row's strip's height

// A long text's whole row in sight, one strip per head shown: every key along the width, a pixel the largest
// value of the keys it covers, the query marked; what the list of the most attended keys leaves out.
function wholeRows(shown, selected, n, largest, measure) {
  const width = 600; // canvas pixels; the strip is stretched to the view's width
  const canvas = el("canvas", { class: "attend-strip", width, height: STRIP_PX * shown.length, style: `height:${STRIP_PX * shown.length}px` });
  const context = canvas.getContext("2d");
  shown.forEach(({ row }, index) => {
    for (let x = 0; x < width; x += 1) {
      const [from, to] = [Math.floor((x * n) / width), Math.max(Math.floor((x * n) / width) + 1, Math.ceil(((x + 1) * n) / width))];
      let top = 0;
      for (let key = from; key < to; key += 1) top = Math.max(top, row[key]);
      context.fillStyle = rgb(sequential(top / largest, "blues"));
      context.fillRect(x, index * STRIP_PX, 1, STRIP_PX - 1);
    }
  });
  context.fillStyle = "#d00";
  context.fillRect(Math.floor((selected * width) / n), 0, 2, STRIP_PX * shown.length);
  const bin = Math.ceil(n / width);
  return el(
    "figure",
    { class: "attend-strip-box", dataset: { field: "whole-row" } },
    canvas,
    el("figcaption", { class: "hint" }, `The whole row: ${n.toLocaleString("en")} keys left to right${bin > 1 ? `, each pixel the largest ${measure.name} among ${bin} keys` : ""}; the red mark is the query.`),
  );
}

// What the hidden sink tokens held (measure.sink), one bar per head shown, on the key bars' scale and baseline.
function sinkRow(shown, tokens, largest, measure) {
  return el(
    "li",
    { class: "sink", dataset: { field: "sink" }, title: `sink: ${measure.sink}` },
    el("span", { class: "attend-token" }, `sink: ${sinkNames(tokens)}`),
    el(
      "span",
      { class: "bars" },
      ...shown.map(({ head, color, sink }) =>
        el("span", { class: "bar sink-bar", title: `${head}: ${fixed(sink)}`, style: `width:${Math.min(100, (100 * sink) / largest / shown.length)}%;--c:${color}` }),
      ),
    ),
    el("span", { class: "attend-weight", dataset: { value: String(shown[0].sink) } }, shown.length === 1 ? fixed(shown[0].sink) : ""),
  );
}

// What the values beside a hidden sink are. Renormalised, a row sums to 1 over every token it keeps, each value
// a share and the sink in the same unit; a segment filter then shows part of that row, and the hint says what
// the part shown sums to.
function sinkHint(tokens, mode, segments, row, measure) {
  const names = sinkNames(tokens);
  const shownSum = row.reduce((sum, value) => (Number.isNaN(value) ? sum : sum + value), 0);
  const text =
    mode === "hide"
      ? `${names} hidden: the sink holds their ${measure.name}; every other value is as computed, not rescaled.`
      : segments
        ? `${names} hidden, and each row rescaled to sum to 1 over every token it keeps: each value is a ${measure.name}, and the sink ${measure.sink}; the ${segments.from} → ${segments.to} filter shows part of this row: the values shown sum to ${fixed(shownSum)}.`
        : `${names} hidden, and each row's other values rescaled to sum to 1: each value is a ${measure.name}, and the sink ${measure.sink} (the values shown sum to ${fixed(shownSum)}).`;
  return el("p", { class: "hint sink-hint", dataset: { field: "sink-hint", sum: String(shownSum) } }, text);
}
