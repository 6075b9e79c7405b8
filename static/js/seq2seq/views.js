// The views of an encoder-decoder's run (views.js runs them): its source and target tokens, the heatmap of the
// chosen kind of attention, what the selected token attends to, and every block and head of that kind. The state's
// `kind` picks the attention; `token` is the selected row: a source token in the encoder's self-attention, a target
// token in the decoder's self-attention and in cross-attention (row i is the step that chooses target token i + 1).
// While a class votes, the views that show numbers are drawn blank (blind.js).

import { attendLines } from "../attends.js";
import { BLANK_NOTE, blankNote } from "../blind.js";
import { sequential } from "../colors.js";
import { count, el, fixed } from "../format.js";
import { measureOf } from "../measures.js";
import { byId } from "../root.js";
import { renderTokens, showSelection } from "../tokens.js";
import { blocksOf, columnsOf, KINDS, matrixOf, notMeasured, rowsOf, switchKind, viewName } from "./kinds.js";
import { PairMap } from "./map.js";

const $ = byId;
const SIDES = { source: "Source", target: "Target" };

// What the view draws, or why it draws nothing: a measure the run does not hold says the run's sentence.
function shownOrWhy(state) {
  const why = notMeasured(state.run, state.measure);
  if (why) throw new Error(`${measureOf(state.measure).name} is not drawn for ${state.run.model.name}: ${why}.`);
  return matrixOf(state.run, state);
}

// The tokens in two strips, Source then Target: a click on a source token opens the encoder's self-attention
// (its rows are the source), on a target token the decoder's or cross-attention (theirs are the target).
export const pairTokensView = {
  id: "tokens",
  follows: ["run", "kind"],
  moves: ["token"],
  render(state, _data, lab) {
    const strip = $("tokens");
    const sides = ["source", "target"].map((side) => {
      const chips = el("div", { class: "pair-chips", dataset: { side } });
      const selected = KINDS[state.kind].rows === side ? state.token : null;
      renderTokens(chips, state.run[side].tokens, selected, {
        select: (index) => {
          const now = lab.getState();
          const kind = side === "source" ? "encoder" : now.kind === "encoder" ? "cross" : now.kind;
          lab.setState({ ...switchKind(now, lab.model, kind), token: index });
        },
        preview: () => {},
      });
      const written = side === "target" && state.run.target.written ? " (written by the model)" : "";
      return el("div", { class: "pair-side", dataset: { side } }, el("span", { class: "pair-side-name" }, `${SIDES[side]}${written}`), chips);
    });
    strip.replaceChildren(...sides);
    strip.setAttribute("aria-label", "Source and target tokens");
    $("tokens-shape").textContent = `${state.run.source.tokens.length} → ${state.run.target.tokens.length}`;
    $("tokens-shape").title = `${count(state.run.source.tokens.length, "source token")}, ${count(state.run.target.tokens.length, "target token")}`;
  },
  move(state) {
    for (const side of ["source", "target"]) {
      const chips = $("tokens").querySelector(`.pair-chips[data-side="${side}"]`);
      showSelection(chips, KINDS[state.kind].rows === side ? state.token : null);
    }
  },
};

export function createPairMapView(lab, bounds) {
  const map = new PairMap($("heatmap"), (row) => lab.setState({ token: row }), { bounds, readout: $("heatmap-readout") });
  new ResizeObserver(() => map.fit()).observe($("views"));
  return {
    id: "heatmap",
    follows: ["run", "kind", "layer", "head", "heads", "measure", "scale", "present"],
    moves: ["token"],
    render(state) {
      const { values, rows, columns } = shownOrWhy(state);
      const rowTokens = rowsOf(state.run, state.kind);
      const columnTokens = columnsOf(state.run, state.kind);
      const measure = measureOf(state.measure);
      const { rows: rowsName, columns: columnsName } = KINDS[state.kind];
      $("attention-name").textContent = `${measure.name} (${KINDS[state.kind].name}): ${measure.meaning}`;
      $("attention-shape").textContent = `${rows}×${columns} per head`;
      map.draw({
        values,
        rows,
        columns,
        rowLabels: rowTokens.map((token) => token.label),
        columnLabels: columnTokens.map((token) => token.label),
        rowsName,
        columnsName,
        title: `${measure.short ? `${measure.short} ` : ""}${viewName(state)} · ${SIDES[rowsName]} rows × ${SIDES[columnsName]} columns`,
        measure,
        scale: state.scale,
        selected: state.token !== null && state.token < rows ? state.token : null,
      });
    },
    move(state) {
      map.select(state.token !== null && state.token < map.shown?.rows ? state.token : null);
    },
    blank: () => map.blank(BLANK_NOTE),
  };
}

// The selected token's row: every token it reads (the source in cross-attention, the earlier target in the
// decoder's), a bar and the number each, and lines from it to them.
export const pairAttendsView = {
  id: "attends",
  follows: ["run", "kind", "layer", "head", "heads", "measure", "token"],
  blank: blankNote("attends"),
  render(state) {
    const container = $("attends");
    const rowTokens = rowsOf(state.run, state.kind);
    const { token } = state;
    if (token === null || token >= rowTokens.length) {
      container.replaceChildren(el("p", { class: "hint" }, `Select a ${KINDS[state.kind].rows} token to see where it looks.`));
      return;
    }
    const { values, columns } = shownOrWhy(state);
    const row = values.subarray(token * columns, (token + 1) * columns);
    const keys = columnsOf(state.run, state.kind);
    // The decoder reads causally: a target token reads itself and the tokens before it, never after.
    const listed = state.kind === "decoder" ? keys.slice(0, token + 1) : keys;
    const largest = listed.reduce((max, key) => Math.max(max, row[key.index]), 1e-9);
    const measure = measureOf(state.measure);
    const query = rowTokens[token];
    const step = state.kind === "encoder" ? "" : token + 1 < rowTokens.length ? `, the step that chooses “${rowTokens[token + 1].label}”` : ", the step after the last target token";
    const caption = el(
      "p",
      { class: "caption" },
      `“${query.label}” (${KINDS[state.kind].rows} token ${token}${step}) in ${viewName(state)}`,
      el("span", { class: "caption-how" }, `: line width and bar length show the ${measure.name} on each ${KINDS[state.kind].columns} token.`),
    );
    const lines = listed.map((key) => ({ from: token, to: key.index, value: row[key.index], color: "var(--accent)" }));
    const svg = attendLines(Math.max(rowTokens.length, listed.length), lines, largest);
    const left = el(
      "ol",
      { class: "attend-queries" },
      ...rowTokens.map((t) => el("li", { class: `${t.index === token ? "selected" : ""}${t.special ? " special" : ""}`, dataset: { index: String(t.index) } }, t.label)),
    );
    const right = el(
      "ol",
      { class: "attend-keys" },
      ...listed.map((key) =>
        el(
          "li",
          { class: `attend-row${key.special ? " special" : ""}`, dataset: { index: String(key.index), weight: String(row[key.index]), segment: key.segment }, title: `${measure.name}: ${fixed(row[key.index])}` },
          el("span", { class: "attend-token" }, key.label),
          el("span", { class: "bars" }, el("span", { class: "bar", style: `width:${(100 * row[key.index]) / largest}%;background:var(--accent)` })),
          el("span", { class: "attend-weight" }, fixed(row[key.index])),
        ),
      ),
    );
    container.replaceChildren(caption, el("div", { class: "attend-grid" }, left, svg, right));
  },
};

// Every block and head of the chosen kind, one small picture each (rows × columns); a click opens it.
export const pairGridView = {
  id: "grid",
  follows: ["run", "kind", "measure", "scale", "layer", "head"],
  shown: (state) => state.panel === "grid",
  blank: blankNote("grid"),
  render(state, _data, lab) {
    const container = $("grid");
    const blocks = blocksOf(state.run.model, state.kind);
    const heads = state.run.model.heads;
    const cells = [];
    for (let layer = 0; layer < blocks; layer += 1) {
      cells.push(el("span", { class: "grid-label" }, `block ${layer}`));
      for (let head = 0; head < heads; head += 1) {
        const { values, rows, columns } = shownOrWhy({ ...state, layer, head });
        const canvas = el("canvas", { width: columns, height: rows });
        const zmax = values.reduce((max, value) => Math.max(max, value), 1e-9);
        const image = new ImageData(columns, rows);
        values.forEach((value, index) => image.data.set([...sequential(value / zmax, state.scale), 255], index * 4));
        canvas.getContext("2d").putImageData(image, 0, 0);
        const name = `${KINDS[state.kind].name}, block ${layer}, head ${head}`;
        const current = state.layer === layer && state.head === head;
        // A head's cells stay square: cross-attention's picture is as tall as the target and as wide as the source.
        const shape = `aspect-ratio:${columns}/${rows}`;
        cells.push(el("button", { type: "button", class: `grid-cell${current ? " current" : ""}`, style: shape, "aria-label": `Open ${name}`, title: name, dataset: { layer: String(layer), head: String(head) } }, canvas));
      }
    }
    const header = [el("span", { class: "grid-label" }, "head"), ...Array.from({ length: heads }, (_, head) => el("span", { class: "grid-label", title: `head ${head}` }, String(head)))];
    container.style.setProperty("--heads", String(heads));
    container.replaceChildren(...header, ...cells);
    $("grid-shape").textContent = `${KINDS[state.kind].name}: ${count(blocks, "block")} × ${count(heads, "head")}`;
    container.onclick = (event) => {
      const cell = event.target.closest(".grid-cell");
      if (cell) lab.setState({ layer: Number(cell.dataset.layer), head: Number(cell.dataset.head) });
    };
  },
};
