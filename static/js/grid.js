// The whole model at a glance: one small picture per (block, head), drawn straight onto canvases.

import { blankNote } from "./blind.js";
import { sequential } from "./colors.js";
import { count, el } from "./format.js";
import { isPerBlock, sinkNames, viewMatrix } from "./matrix.js";
import { measureOf } from "./measures.js";
import { byId } from "./root.js";

// overview: {shape: [layer, head, size, size], values: Uint8Array, scale}, each head shrunk by the server
// when the run is longer than `size`. A head of full size goes through the view's own sink and segment
// filters (matrix.js), as the heatmap does; a shrunk one has no columns left to filter.
export function renderGrid(container, { overview, tokens, view, onOpen }) {
  const [layers, heads, n] = overview.shape;
  const full = n === tokens.length;
  const weights = Float32Array.from(overview.values, (byte) => byte / overview.scale);
  const cellsOf = (layer, head) => {
    const offset = (layer * heads + head) * n * n;
    const block = [];
    block[head] = weights.subarray(offset, offset + n * n);
    const blocks = [];
    blocks[layer] = block;
    blocks.length = layers;
    if (!full) return block[head];
    return viewMatrix(blocks, tokens, { ...view, layer, head, blockMean: false }).matrix;
  };
  const cells = [];
  for (let layer = 0; layer < layers; layer += 1) {
    cells.push(el("span", { class: "grid-label" }, `block ${layer}`));
    for (let head = 0; head < heads; head += 1) {
      const canvas = el("canvas", { width: n, height: n });
      paint(canvas, cellsOf(layer, head), view.scale);
      const isCurrent = view.layer === layer && (heads === 1 || view.head === head);
      const name = isPerBlock(view.measure) ? `block ${layer}` : `block ${layer}, head ${head}`;
      cells.push(
        el(
          "button",
          {
            type: "button",
            class: `grid-cell${isCurrent ? " current" : ""}`,
            "aria-label": `Open ${name}`,
            title: name,
            dataset: { layer: String(layer), head: String(head) },
          },
          canvas,
        ),
      );
    }
  }
  // The heads by number under one "head", so that twelve columns keep their labels in large type.
  // A measure with one picture per block (ALTI) has no heads to number.
  const header = isPerBlock(view.measure)
    ? [el("span", { class: "grid-label" }, ""), el("span", { class: "grid-label" }, "one picture per block")]
    : [el("span", { class: "grid-label" }, "head"), ...Array.from({ length: heads }, (_, head) => el("span", { class: "grid-label", title: `head ${head}` }, String(head)))];
  container.style.setProperty("--heads", String(heads));
  container.replaceChildren(...header, ...cells);
  container.onclick = (event) => {
    const cell = event.target.closest(".grid-cell");
    if (cell) onOpen(Number(cell.dataset.layer), Number(cell.dataset.head));
  };
}

// Each head's mean share of attention on the special tokens and on "." (api.headStats), printed on its
// square: where the sinks are, across the whole model.
function printShares(container, stats) {
  for (const stat of stats) {
    const cell = container.querySelector(`.grid-cell[data-layer="${stat.layer}"][data-head="${stat.head}"]`);
    cell.querySelector(".grid-share")?.remove();
    const special = stat.cls + stat.sep;
    cell.dataset.special = String(special);
    cell.dataset.period = String(stat.period);
    cell.append(el("span", { class: "grid-share" }, `S ${special.toFixed(2)} · “.” ${stat.period.toFixed(2)}`));
  }
}

export function markCurrent(container, layer, head) {
  for (const cell of container.querySelectorAll(".grid-cell")) {
    cell.classList.toggle("current", Number(cell.dataset.layer) === layer && Number(cell.dataset.head) === head);
  }
}

// Each head scaled to its own maximum, so a head that spreads its weight thinly is still visible; a cell
// the view leaves out is grey.
function paint(canvas, matrix, scale) {
  const context = canvas.getContext("2d");
  const image = context.createImageData(canvas.width, canvas.height);
  const largest = matrix.reduce((max, value) => (Number.isNaN(value) ? max : Math.max(max, value)), 1e-9);
  matrix.forEach((value, cell) => {
    const [r, g, b] = Number.isNaN(value) ? [225, 225, 225] : sequential(value / largest, scale);
    image.data.set([r, g, b, 255], cell * 4);
  });
  context.putImageData(image, 0, 0);
}

// The whole overview as one picture, labels included: each head's canvas copied into a sheet.
const SHEET = { cell: 72, gap: 6, left: 70, top: 50 };

function sheet(container) {
  const cells = [...container.querySelectorAll(".grid-cell")];
  const layers = Math.max(...cells.map((cell) => Number(cell.dataset.layer))) + 1;
  const heads = Math.max(...cells.map((cell) => Number(cell.dataset.head))) + 1;
  const step = SHEET.cell + SHEET.gap;
  const width = SHEET.left + heads * step;
  const height = SHEET.top + layers * step;
  const canvas = el("canvas", { width, height });
  const context = canvas.getContext("2d");
  context.fillStyle = "#fff";
  context.fillRect(0, 0, width, height);
  context.imageSmoothingEnabled = false;
  for (const cell of cells) {
    const x = SHEET.left + Number(cell.dataset.head) * step;
    const y = SHEET.top + Number(cell.dataset.layer) * step;
    context.drawImage(cell.querySelector("canvas"), x, y, SHEET.cell, SHEET.cell);
  }
  const labels = [
    ...Array.from({ length: heads }, (_, head) => ({ text: `head ${head}`, x: SHEET.left + head * step + SHEET.cell / 2, y: SHEET.top - 8 })),
    ...Array.from({ length: layers }, (_, layer) => ({ text: `block ${layer}`, x: SHEET.left - 36, y: SHEET.top + layer * step + SHEET.cell / 2 })),
  ];
  return { canvas, width, height, labels };
}

export function gridPNG(container, title) {
  const { canvas, labels } = sheet(container);
  const context = canvas.getContext("2d");
  context.fillStyle = "#111";
  context.textAlign = "center";
  context.textBaseline = "middle";
  context.font = "12px sans-serif";
  for (const { text, x, y } of labels) context.fillText(text, x, y);
  context.textAlign = "left";
  context.font = "15px sans-serif";
  context.fillText(title, 8, 16);
  return new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
}

export function gridSVG(container, title) {
  const { canvas, width, height, labels } = sheet(container);
  const escape = (value) => value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const svg = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif">`,
    `<image x="0" y="0" width="${width}" height="${height}" style="image-rendering:pixelated" href="${canvas.toDataURL("image/png")}"/>`,
    `<text x="8" y="20" font-size="15">${escape(title)}</text>`,
    ...labels.map(({ text, x, y }) => `<text x="${x}" y="${y}" font-size="12" text-anchor="middle" dominant-baseline="middle">${escape(text)}</text>`),
    "</svg>",
  ];
  return new Blob([svg.join("\n")], { type: "image/svg+xml" });
}

export const gridView = {
  id: "grid",
  follows: ["run", "scale", "sinks", "segments", "measure"],
  moves: ["layer", "head"],
  shown: (state) => state.panel === "grid",
  blank: blankNote("grid"),
  load: (state, lab) => lab.numbers().overview(state.measure),
  render(state, overview, lab) {
    const { run } = state;
    const n = run.tokens.length;
    byId("grid-shape").textContent = `${count(lab.model.layers, "block")} × ${count(lab.model.heads, "head")}, each ${n}×${n}`;
    const whole = overview.shape[2] === n; // the filters apply in the grid only to whole matrices
    const measure = measureOf(state.measure, whole ? state.sinks : "show");
    const square = `Each square is one ${measure.per_block ? "block" : "head"}'s ${measure.name}`;
    byId("grid-hint").textContent =
      whole
        ? `${square}, with the filters above. Click one to open it.`
        : `${square}, shrunk to ${overview.shape[2]}×${overview.shape[2]} (the largest value of each patch); the filters above apply in the heatmap. Click one to open it.`;
    renderGrid(byId("grid"), {
      overview,
      tokens: run.tokens,
      view: state,
      onOpen: (layer, head) => lab.setState({ layer, head }),
    });
    showShares(byId("grid"), state, lab);
  },
  move: (state) => markCurrent(byId("grid"), state.layer, state.head),
};

// The per-head shares, when asked for (the checkbox above the grid).
export async function showShares(container, state, lab) {
  for (const share of container.querySelectorAll(".grid-share")) share.remove();
  byId("grid-shares-names").textContent = sinkNames(state.run.tokens) || "added tokens";
  if (!byId("grid-shares").checked) return;
  const stats = await lab.numbers().headStats();
  if (lab.getState().run === state.run) printShares(container, stats.heads);
}
