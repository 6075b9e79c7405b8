// Saving what is on screen: the heatmap as PNG, its numbers as JSON or CSV. All made in the page.

import { measureOf, noHead } from "./measures.js";

// blob: an image made by the view (Heatmap.toPNG, toSVG, …); extension: "png" or "svg".
export function saveImage(blob, name, extension) {
  download(blob, `${name}.${extension}`);
}

// A saved heatmap's frame, drawn the same on both pages: a white sheet of width × height, the cells (a canvas of one
// pixel per cell) scaled into `at` unsmoothed so each cell stays a sharp square, and the title in the top left.
// Returns the sheet's 2D context for the rest of the picture.
export function framedPicture({ width, height, cells, at, title }) {
  const canvas = Object.assign(document.createElement("canvas"), { width, height });
  const context = canvas.getContext("2d");
  context.fillStyle = "#fff";
  context.fillRect(0, 0, width, height);
  context.imageSmoothingEnabled = false;
  context.drawImage(cells, at.x, at.y, at.width, at.height);
  context.fillStyle = "#111";
  context.font = "16px sans-serif";
  context.fillText(title, 10, 22);
  return context;
}

export function pngOf(canvas) {
  return new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
}

function download(content, name, type) {
  const url = URL.createObjectURL(content instanceof Blob ? content : new Blob([content], { type }));
  const link = Object.assign(document.createElement("a"), { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// Exactly what the heatmap draws, and what it is: the view (its measure and what its cells are, block or the
// mean of all blocks, head or head set, sink and segment filters) in words and as fields, the prompt, the
// model, the matrix with the cells the view leaves out as null, and what the hidden sink tokens held per row
// when they are hidden, in the cells' unit and said in `sink_meaning`. A measure with one picture per block
// (ALTI) has no head: head and heads are null and `no_head` says why.
// window: a long run's window the heatmap shows, {row, col, size}, whose exact cells `matrix` holds
// ([size, size]); null: the whole matrix ([n, n]).
export function exportedView({ state, model, matrix, sink, pooled, name, window = null }) {
  const { run } = state;
  const n = run.tokens.length;
  const { row: row0, col: col0, size } = window ?? { row: 0, col: 0, size: n };
  const cell = (value) => (Number.isNaN(value) ? null : value);
  const measure = measureOf(state.measure, state.sinks);
  const heads = measure.per_block ? { head: null, heads: null, no_head: noHead(measure) } : { head: state.head, heads: state.head === "mean" ? state.heads : [state.head] };
  return {
    text: state.text,
    text_pair: run.text_pair,
    model: model.name,
    // The model's numbers are in this dtype; the matrix holds them as float32, which holds bfloat16 and float16
    // exactly.
    dtype: model.dtype,
    mask: run.mask,
    pooling: run.pooling,
    view: {
      name,
      measure: state.measure,
      measure_name: measure.name,
      values: measure.values,
      blocks: state.blockMean ? "mean" : state.layer,
      layer: state.blockMean ? null : state.layer,
      ...heads,
      sinks: state.sinks,
      segments: state.segments,
    },
    tokens: run.tokens,
    // The query rows and key columns the matrix holds: every token, or a long run's window.
    rows: [row0, row0 + size],
    cols: [col0, col0 + size],
    matrix: Array.from({ length: size }, (_, row) => Array.from(matrix.subarray(row * size, (row + 1) * size), cell)),
    sink: sink === null ? null : Array.from(sink),
    sink_meaning: sink === null ? null : measure.sink,
    pooled,
  };
}

export function saveJSON(view, name) {
  download(JSON.stringify(view, null, 1), `${name}.json`, "application/json");
}

// One cell of every CSV the page writes, by the rule of the class's answers (app/classroom/answers.py,
// csv_cell, where it is explained): numbers as they are; text with a ' before a leading = + - @, tab or
// carriage return (after any spaces), so a spreadsheet never runs it as a formula; quoted where it must be.
export function csvCell(value) {
  if (typeof value === "number") return String(value);
  const text = /^ *[=+\-@\t\r]/.test(value) ? `'${value}` : value;
  return /[",\n\r]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

// The same as a table: rows are queries, columns keys; a cell the view leaves out is empty; with the sink
// tokens hidden, a last column holds what they held per row, its header saying what that is.
export function saveCSV(view, name) {
  const sink = view.sink === null ? [] : [`sink: ${view.sink_meaning}`];
  const perBlock = view.view.no_head ? ` (${view.view.no_head})` : "";
  const lines = [
    csvCell(`# prompt: ${view.text.replace(/[\r\n]+/g, " ")}`),
    csvCell(`# model: ${view.model} (${view.dtype}); mask: ${view.mask}; view: ${view.view.name}${perBlock}; each cell: ${view.view.measure_name} (${view.view.values}); special tokens: ${view.view.sinks}; segments: ${view.view.segments}; rows are queries ${view.rows[0]}–${view.rows[1] - 1}, columns keys ${view.cols[0]}–${view.cols[1] - 1}`),
    ["query \\ key", ...view.tokens.slice(...view.cols).map((token) => token.label), ...sink].map(csvCell).join(","),
    ...view.matrix.map((row, offset) => {
      const index = view.rows[0] + offset;
      return [view.tokens[index].label, ...row.map((value) => value ?? ""), ...(view.sink === null ? [] : [view.sink[index]])].map(csvCell).join(",");
    }),
  ];
  download(`${lines.join("\n")}\n`, `${name}.csv`, "text/csv");
}

// A table of numbers as CSV: comment lines first (each one cell), then the rows, every cell as saveCSV's.
export function saveRows(about, rows, name) {
  const lines = [...about.map(csvCell), ...rows.map((row) => row.map(csvCell).join(","))];
  download(`${lines.join("\n")}\n`, `${name}.csv`, "text/csv");
}
