// The whole model at a glance: one small picture per (block, head), drawn straight onto canvases.

import { blankNote } from "./blind.js";
import { sequential } from "./colors.js";
import { pngOf } from "./export.js";
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

// The whole overview as one picture, labels included: each head's canvas placed on a sheet, its cells square as on
// the page (an encoder-decoder's cross-attention head is as wide as the source and as tall as the target), the
// sheet at least as wide as its title.
const SHEET = { cell: 72, gap: 6, left: 70, top: 50, font: "15px sans-serif" };

function sheet(container, title) {
  const cells = [...container.querySelectorAll(".grid-cell")];
  if (!cells.length) throw new Error("The grid is not drawn (a class is voting, or no run yet): there is nothing to save.");
  const layers = Math.max(...cells.map((cell) => Number(cell.dataset.layer))) + 1;
  const heads = Math.max(...cells.map((cell) => Number(cell.dataset.head))) + 1;
  const { width: columns, height: rows } = cells[0].querySelector("canvas");
  const size = { width: SHEET.cell * Math.min(1, columns / rows), height: SHEET.cell * Math.min(1, rows / columns) };
  const step = { x: size.width + SHEET.gap, y: size.height + SHEET.gap };
  const probe = document.createElement("canvas").getContext("2d");
  probe.font = SHEET.font;
  const width = Math.ceil(Math.max(SHEET.left + heads * step.x, probe.measureText(title).width + 16));
  const height = Math.ceil(SHEET.top + layers * step.y);
  const placed = cells.map((cell) => ({
    canvas: cell.querySelector("canvas"),
    x: SHEET.left + Number(cell.dataset.head) * step.x,
    y: SHEET.top + Number(cell.dataset.layer) * step.y,
    ...size,
  }));
  const labels = [
    ...Array.from({ length: heads }, (_, head) => ({ text: `head ${head}`, x: SHEET.left + head * step.x + size.width / 2, y: SHEET.top - 8 })),
    ...Array.from({ length: layers }, (_, layer) => ({ text: `block ${layer}`, x: SHEET.left - 36, y: SHEET.top + layer * step.y + size.height / 2 })),
  ];
  return { placed, width, height, labels };
}

// container: a drawn grid (#grid, either page's); title: what it shows, the first line of the picture.
export function gridPNG(container, title) {
  const { placed, width, height, labels } = sheet(container, title);
  const context = Object.assign(document.createElement("canvas"), { width, height }).getContext("2d");
  context.fillStyle = "#fff";
  context.fillRect(0, 0, width, height);
  context.imageSmoothingEnabled = false;
  for (const { canvas, x, y, width: w, height: h } of placed) context.drawImage(canvas, x, y, w, h);
  context.fillStyle = "#111";
  context.textAlign = "center";
  context.textBaseline = "middle";
  context.font = "12px sans-serif";
  for (const { text, x, y } of labels) context.fillText(text, x, y);
  context.textAlign = "left";
  context.font = SHEET.font;
  context.fillText(title, 8, 16);
  return pngOf(context.canvas);
}

// The same as an SVG: each head its own embedded image (class "head"), the labels and title text.
export function gridSVG(container, title) {
  const { placed, width, height, labels } = sheet(container, title);
  const escape = (value) => value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const svg = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif">`,
    `<title>${escape(title)}</title>`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    ...placed.map(
      ({ canvas, x, y, width: w, height: h }) =>
        `<image x="${x}" y="${y}" width="${w}" height="${h}" preserveAspectRatio="none" style="image-rendering:pixelated" class="head" href="${canvas.toDataURL("image/png")}"/>`,
    ),
    `<text x="8" y="20" font-size="15" class="title">${escape(title)}</text>`,
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
