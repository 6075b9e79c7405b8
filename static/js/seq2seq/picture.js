// An encoder-decoder's heatmap as a picture to save (PNG or SVG): what the PairMap draws, with its title, the
// source and the target it reads, each row's and column's token, the axes named (source or target) and the colour
// bar with its range. The cells stay square, so cross-attention's picture is as tall as the target and as wide
// as the source, as on the page. Laid out once for both formats.

import { rgb, sequential } from "../colors.js";
import { framedPicture, pngOf } from "../export.js";
import { count, fixed } from "../format.js";
import { measureOf } from "../measures.js";
import { blocksOf, KINDS } from "./kinds.js";

const MAX_SIDE = 560; // px: the longer side of the cells at most
const MIN_LABEL_GAP = 13; // px between axis labels; beyond that they thin out
const SIDES = { source: "Source", target: "Target" };

const kindFileName = (kind) => (kind === "cross" ? "cross-attention" : `${kind}-attention`);

// "cross-attention-weights-block1-head2", "decoder-attention-norm-block0-heads-mean": the kind, measure, block and
// head (or heads) a saved picture shows.
export function pairFileName({ kind, measure, layer, head, heads }, model) {
  const which = head !== "mean" ? `head${head}` : heads.length === model.heads ? "heads-mean" : `heads-${heads.join("-")}-mean`;
  return [kindFileName(kind), measureOf(measure).key.replace("_", "-"), `block${layer}`, which].join("-");
}

// The every-head grid's picture (grid.js draws it): its title names the kind, the measure and the shape, its file
// the kind and measure ("cross-attention-weights-grid").
export function pairGridTitle({ run, kind, measure }) {
  const { name, rows, columns } = KINDS[kind];
  const shape = `${run[rows].tokens.length} ${rows} × ${run[columns].tokens.length} ${columns} tokens`;
  const size = `${count(blocksOf(run.model, kind), "block")} × ${count(run.model.heads, "head")}, each ${shape}`;
  return `Every head of ${name} · ${measureOf(measure).name} · ${size} · ${run.model.name}`;
}

export function pairGridFileName({ kind, measure }) {
  return [kindFileName(kind), measureOf(measure).key.replace("_", "-"), "grid"].join("-");
}

// map: the page's PairMap, drawn; run: the encoder-decoder's run (its source and target texts).
function layout(map, run) {
  if (!map.shown) throw new Error("The heatmap is not drawn (a class is voting, or no run yet): there is nothing to save.");
  const { rows, columns, rowLabels, columnLabels, rowsName, columnsName, measure } = map.shown;
  const cell = Math.min(MAX_SIDE / Math.max(rows, columns), 44);
  const [plotWidth, plotHeight] = [cell * columns, cell * rows];
  const step = Math.max(1, Math.ceil(MIN_LABEL_GAP / cell));
  const every = (labels) => labels.flatMap((label, index) => (index % step === 0 ? [{ label, middle: (index + 0.5) * cell }] : []));
  const quoted = (text) => `“${text.length > 70 ? `${text.slice(0, 69)}…` : text}”`.replace(/[\r\n]+/g, " ");
  const margin = { left: 130, top: 84, bottom: 120, right: 150 };
  const bar = { x: margin.left + plotWidth + 40, y: margin.top, width: 16, height: Math.max(plotHeight, 120) };
  const width = Math.max(margin.left + plotWidth + margin.right, 620);
  const height = margin.top + Math.max(plotHeight, bar.height) + margin.bottom;
  return {
    margin,
    cell,
    plotWidth,
    plotHeight,
    bar,
    width,
    height,
    title: map.title.textContent,
    lines: [`Source: ${quoted(run.source.text)}`, `Target${run.target.written ? " (written by the model)" : ""}: ${quoted(run.target.text)} · ${run.model.name}`],
    rows: every(rowLabels),
    columns: every(columnLabels),
    rowsTitle: `${SIDES[rowsName]} tokens: looking (queries)`,
    columnsTitle: `${SIDES[columnsName]} tokens: looked at (keys)`,
    range: [fixed(map.zmax, 3), "0"],
    legend: measure.name,
  };
}

export function pairPNG(map, run) {
  const picture = layout(map, run);
  const { margin, plotWidth, plotHeight, bar, width, height } = picture;
  const at = { x: margin.left, y: margin.top, width: plotWidth, height: plotHeight };
  const context = framedPicture({ width, height, cells: map.canvas, at, title: picture.title });
  context.font = "13px sans-serif";
  picture.lines.forEach((line, index) => context.fillText(line, 10, 44 + 18 * index));
  context.font = "11px sans-serif";
  context.textAlign = "right";
  context.textBaseline = "middle";
  for (const { label, middle } of picture.rows) context.fillText(label, margin.left - 6, margin.top + middle);
  for (const { label, middle } of picture.columns) {
    context.save();
    context.translate(margin.left + middle, margin.top + plotHeight + 6);
    context.rotate(-Math.PI / 3);
    context.fillText(label, 0, 0);
    context.restore();
  }
  context.textAlign = "center";
  context.textBaseline = "alphabetic";
  context.font = "12px sans-serif";
  context.fillText(picture.columnsTitle, margin.left + plotWidth / 2, height - 12);
  context.save();
  context.translate(16, margin.top + plotHeight / 2);
  context.rotate(-Math.PI / 2);
  context.fillText(picture.rowsTitle, 0, 0);
  context.restore();
  const ramp = context.createLinearGradient(0, bar.y + bar.height, 0, bar.y);
  for (let step = 0; step <= 20; step += 1) ramp.addColorStop(step / 20, rgb(sequential(step / 20, map.shown.scale)));
  context.fillStyle = ramp;
  context.fillRect(bar.x, bar.y, bar.width, bar.height);
  context.strokeStyle = "#888";
  context.strokeRect(bar.x, bar.y, bar.width, bar.height);
  context.fillStyle = "#111";
  context.textAlign = "left";
  context.font = "11px sans-serif";
  context.fillText(picture.range[0], bar.x + bar.width + 6, bar.y + 6);
  context.fillText(picture.range[1], bar.x + bar.width + 6, bar.y + bar.height);
  context.save();
  context.translate(bar.x + bar.width + 56, bar.y + bar.height / 2);
  context.rotate(-Math.PI / 2);
  context.textAlign = "center";
  context.fillText(picture.legend, 0, 0);
  context.restore();
  return pngOf(context.canvas);
}

// The same as an SVG: the cells one embedded image, everything else vectors and text (escaped).
export function pairSVG(map, run) {
  const picture = layout(map, run);
  const { margin, plotWidth, plotHeight, bar, width, height } = picture;
  const text = (value) => value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const stops = Array.from({ length: 21 }, (_, step) => `<stop offset="${step * 5}%" stop-color="${rgb(sequential(1 - step / 20, map.shown.scale))}"/>`);
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif">`,
    `<title>${text(picture.title)}</title>`,
    `<defs><linearGradient id="ramp" x1="0" y1="0" x2="0" y2="1">${stops.join("")}</linearGradient></defs>`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="10" y="22" font-size="16" class="title">${text(picture.title)}</text>`,
    ...picture.lines.map((line, index) => `<text x="10" y="${44 + 18 * index}" font-size="13" class="about">${text(line)}</text>`),
    `<image x="${margin.left}" y="${margin.top}" width="${plotWidth}" height="${plotHeight}" preserveAspectRatio="none" style="image-rendering:pixelated" href="${map.canvas.toDataURL("image/png")}"/>`,
    ...picture.rows.map(({ label, middle }) => `<text x="${margin.left - 6}" y="${margin.top + middle}" font-size="11" text-anchor="end" dominant-baseline="middle" class="row">${text(label)}</text>`),
    ...picture.columns.map(({ label, middle }) => `<text font-size="11" text-anchor="end" transform="translate(${margin.left + middle},${margin.top + plotHeight + 6}) rotate(-60)" class="column">${text(label)}</text>`),
    `<text x="${margin.left + plotWidth / 2}" y="${height - 12}" font-size="12" text-anchor="middle" class="columns">${text(picture.columnsTitle)}</text>`,
    `<text font-size="12" text-anchor="middle" transform="translate(16,${margin.top + plotHeight / 2}) rotate(-90)" class="rows">${text(picture.rowsTitle)}</text>`,
    `<rect x="${bar.x}" y="${bar.y}" width="${bar.width}" height="${bar.height}" fill="url(#ramp)" stroke="#888"/>`,
    `<text x="${bar.x + bar.width + 6}" y="${bar.y + 6}" font-size="11">${picture.range[0]}</text>`,
    `<text x="${bar.x + bar.width + 6}" y="${bar.y + bar.height}" font-size="11">${picture.range[1]}</text>`,
    `<text font-size="12" text-anchor="middle" transform="translate(${bar.x + bar.width + 56},${bar.y + bar.height / 2}) rotate(-90)">${text(picture.legend)}</text>`,
    "</svg>",
  ];
  return new Blob([parts.join("\n")], { type: "image/svg+xml" });
}
