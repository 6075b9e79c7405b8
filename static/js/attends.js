// "What does this token attend to?": lines from the selected query to every key (as bertviz draws
// them) beside bars with the exact weights; one head, the mean, or all heads in their own colours.

import { blankNote, revealedKey } from "./blind.js";
import { HEAD_COLORS } from "./colors.js";
import { meanOf, meanRow, segmentRule, sinkNames, viewName } from "./matrix.js";
import { el, fixed } from "./format.js";
import { queries } from "./selection.js";

const ROW_REM = 1.45; // a token row's height, as lab.css sets it
const MAX_ROWS = 64; // beyond this many keys only the largest are listed: 512 rows help nobody and cost a click

// The rows the view draws: for each head shown, the mean of the selected queries' rows of the view's
// matrix (matrix.js: the same numbers the heatmap draws), and their sink.
async function attendRows(state, lab) {
  const chosen = queries(state);
  const n = state.run.tokens.length;
  const views = state.allHeads
    ? HEAD_COLORS.slice(0, lab.model.heads).map((color, head) => ({ name: `head ${head}`, color, view: { ...state, head } }))
    : [{ name: state.head === "mean" ? "mean" : `head ${state.head}`, color: state.head === "mean" ? "currentColor" : HEAD_COLORS[state.head % HEAD_COLORS.length], view: state }];
  return Promise.all(
    views.map(async ({ name, color, view }) => {
      const { matrix, sink } = await lab.numbers().matrix(view, state.run.tokens, lab.model.layers);
      return { head: name, color, row: meanRow(matrix, n, chosen), sink: sink === null ? null : meanOf(sink, chosen) };
    }),
  );
}

function caption(state, chosen, model) {
  const { run } = state;
  const token = chosen[0];
  const who =
    chosen.length > 1
      ? `${chosen.length} tokens (${chosen.map((index) => `“${run.tokens[index].text}”`).join(", ")}), rows averaged,`
      : `“${run.tokens[token].text}” (token ${token})${state.preview !== null ? " (preview: click to lock)" : ""}`;
  const where = state.allHeads ? viewName({ ...state, head: 0 }, model).replace(/head 0$/, "every head") : viewName(state, model);
  const what = state.measure === "weights" ? "its weight" : "the measure";
  return `${who} in ${where}: line width and bar length show ${what} on each token.`;
}

export const attendsView = {
  id: "attends",
  follows: ["run", "layer", "head", "heads", "blockMean", "token", "also", "preview", "sinks", "segments", "allHeads", "measure", "question"],
  load: (state, lab) => (queries(state).length ? attendRows(state, lab) : []),
  render(state, rows, lab) {
    const chosen = queries(state);
    renderAttends(document.getElementById("attends"), {
      tokens: state.run.tokens,
      selected: chosen[0] ?? null,
      rows,
      sinks: state.sinks,
      segments: segmentRule(state.segments),
      caption: chosen.length ? caption(state, chosen, lab.model) : "",
      answer: revealedKey(state),
    });
  },
  blank: blankNote("attends"),
};

// rows: [{head, color, row, sink}] with row = the view's weights of the selected query over all keys (NaN
// where the view leaves a key out) and sink = the weight on the hidden sink tokens, or null.
// segments: a segment rule (matrix.js) or null: with one, only queries of its first segment have a row.
// answer: a key outlined as a class question's revealed answer, or null.
export function renderAttends(container, { tokens, selected, rows, sinks: mode, segments = null, caption, answer = null }) {
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
  const shown = rows.map(({ head, color, row, sink }) => ({ head, color, row: Array.from(row, (weight) => (Number.isNaN(weight) ? 0 : weight)), sink }));
  const candidates = tokens.filter((token) => !Number.isNaN(rows[0].row[token.index]));
  const strength = (token) => Math.max(...shown.map(({ row }) => row[token.index]));
  const keys =
    candidates.length <= MAX_ROWS
      ? candidates
      : [...candidates].sort((a, b) => strength(b) - strength(a)).slice(0, MAX_ROWS).sort((a, b) => a.index - b.index);
  // A long text lists only the selected query on the left, at the top where it stays in sight.
  const queryTokens = tokens.length <= MAX_ROWS ? tokens : [tokens[selected]];
  const queryRow = tokens.length <= MAX_ROWS ? selected : 0;
  const ROW = ROW_REM * parseFloat(getComputedStyle(document.documentElement).fontSize);
  const height = Math.max(keys.length, queryTokens.length, 1) * ROW;
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
    ...queryTokens.map((token) =>
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
          class: `attend-row${token.special ? " special" : ""}${token.index === answer ? " answer" : ""}`,
          dataset: { index: String(token.index), ...(single === null ? {} : { weight: String(single) }) },
        },
        el("span", { class: "attend-token" }, token.text),
        el("span", { class: "bars" }, ...bars),
        single === null ? null : el("span", { class: "attend-weight" }, fixed(single)),
      );
    }),
  );
  const sinks = hideSpecial ? sinkBars(shown, tokens, mode, largest) : null;
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

// The weight taken off the hidden sink tokens, one bar per head shown, on the same scale as the key bars.
function sinkBars(shown, tokens, mode, largest) {
  const names = sinkNames(tokens);
  return el(
    "div",
    { class: "sink", dataset: { field: "sink" } },
    el("span", { class: "attend-token" }, `sink: ${names}`),
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
