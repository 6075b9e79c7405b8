// The stage's heatmap: the matrix of the current view (matrix.js), as large a square as the stage leaves,
// redrawn crisp whenever the window changes size. Selecting a token only moves its outline.

import { revealedKey } from "./blind.js";
import { count } from "./format.js";
import { LONG_FROM } from "./data.js";
import { Heatmap } from "./heatmap.js";
import { maskName, sinkNames, viewLayers, viewName } from "./matrix.js";
import { measureOf } from "./measures.js";
import { byId, find } from "./root.js";
import { queries } from "./selection.js";

const PHONE_HEIGHT_SHARE = 0.75; // on a phone the square takes at most this share of the window's height

const $ = byId;

export function stageBounds() {
  const views = $("views");
  const column = find(".heatmap-column");
  const style = getComputedStyle(column);
  const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight) + 2 * parseFloat(style.borderLeftWidth);
  const oneColumn = getComputedStyle(views).flexDirection === "column";
  const height = oneColumn ? window.innerHeight * PHONE_HEIGHT_SHARE : find(".heatmap-box").clientHeight;
  return { width: column.clientWidth - padding, height };
}

function showSelection(heatmap, state) {
  const [first = null, ...others] = queries(state);
  heatmap.select(first, others);
  if (state.token !== null) heatmap.reveal(state.token);
}

// A revealed class question's answer, outlined as a cell: the asked token's row, the answer's column.
function markAnswer(heatmap, state) {
  const key = revealedKey(state);
  heatmap.mark(key === null ? null : { row: state.token, col: key });
}

// A long run's heatmap reads its view's overview, max-pooled by the server, its windows' cells and its
// queries' exact rows (data.js), before sinks and segments: the attends view applies those to a row.
async function longSource(state, lab) {
  const numbers = lab.numbers();
  const { layers } = lab.model;
  const n = state.run.tokens.length;
  const overview = await numbers.pooledView(state, layers);
  const zmax = overview.values.reduce((max, value) => Math.max(max, value), 1e-9);
  return {
    long: {
      n,
      overview,
      zmax,
      window: (window) => numbers.windowOf(state, layers, window),
      row: (query) => numbers.rawRow(state, layers, n, query),
    },
  };
}

function filtered(state) {
  return state.sinks !== "show" || state.segments !== "all";
}

export function createAttentionView(lab) {
  const heatmap = new Heatmap($("heatmap"), (index) => lab.setState({ token: index, also: [] }), {
    bounds: stageBounds,
    readout: $("heatmap-readout"),
  });
  heatmap.fit();
  // The square follows the stage's size and the screen's pixel density.
  new ResizeObserver(() => heatmap.fit()).observe($("views"));
  new ResizeObserver(() => heatmap.fit()).observe(find(".heatmap-box"));
  matchMedia(`(resolution: ${window.devicePixelRatio}dppx)`).addEventListener("change", () => heatmap.fit());
  return {
    heatmap,
    id: "heatmap",
    follows: ["run", "layer", "head", "heads", "blockMean", "segments", "sinks", "scale", "present", "measure", "question"],
    moves: ["token", "also", "preview"],
    load: (state, lab) => (state.run.tokens.length > LONG_FROM ? longSource(state, lab) : lab.numbers().matrix(state, state.run.tokens, lab.model.layers)),
    render(state, { matrix = null, sink = null, long = null }) {
      const { run } = state;
      const n = run.tokens.length;
      // A long run's heatmap draws every key as computed: the sink and segment filters apply to the attends view.
      const drawn = long ? { ...state, sinks: "show", segments: "all" } : state;
      const measure = measureOf(drawn.measure, drawn.sinks);
      $("attention-name").textContent = `${measure.name}: ${measure.meaning}`;
      $("attention-shape").textContent = measure.per_block ? `${n}×${n} per block` : `${n}×${n} per head · ${count(lab.model.heads, "head")} per block`;
      const [first = null, ...others] = queries(state);
      heatmap.draw({
        matrix,
        long,
        sink,
        sinkNames: sinkNames(run.tokens),
        labels: run.tokens.map((token) => token.label),
        selected: first,
        also: others,
        title: `${viewName(drawn, lab.model)} · ${maskName(run.mask, lab.model, viewLayers(state, lab.model))}${long && filtered(state) ? " · every key shown (the sink and segment filters apply to the attends view)" : ""}`,
        caption: `“${state.text}”${run.text_pair ? ` + “${run.text_pair}”` : ""} · ${lab.model.name}`,
        scale: state.scale,
        measure,
      });
      if (state.token !== null) heatmap.reveal(state.token);
      markAnswer(heatmap, state);
    },
    blank: () => heatmap.blank(),
    move(state) {
      showSelection(heatmap, state);
      markAnswer(heatmap, state);
    },
  };
}
