// Saving what is on screen: the heatmap as PNG, its numbers as JSON or CSV. All made in the page.

import { measureOf } from "./measures.js";

// blob: an image made by the view (Heatmap.toPNG, toSVG, …); extension: "png" or "svg".
export function saveImage(blob, name, extension) {
  download(blob, `${name}.${extension}`);
}

function download(content, name, type) {
  const url = URL.createObjectURL(content instanceof Blob ? content : new Blob([content], { type }));
  const link = Object.assign(document.createElement("a"), { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// Exactly what the heatmap draws, and what it is: the view (its measure, block or the mean of all blocks,
// head or head set, sink and segment filters) in words and as fields, the prompt, the model, the matrix with
// the cells the view leaves out as null, and the value on the hidden sink tokens per row when they are hidden.
// window: a long run's window the heatmap shows, {row, col, size}, whose exact cells `matrix` holds
// ([size, size]); null: the whole matrix ([n, n]).
export function exportedView({ state, model, matrix, sink, pooled, name, window = null }) {
  const { run } = state;
  const n = run.tokens.length;
  const { row: row0, col: col0, size } = window ?? { row: 0, col: 0, size: n };
  const cell = (value) => (Number.isNaN(value) ? null : value);
  return {
    text: state.text,
    text_pair: run.text_pair,
    model: model.name,
    mask: run.mask,
    pooling: run.pooling,
    view: {
      name,
      measure: state.measure,
      measure_name: measureOf(state.measure).name,
      blocks: state.blockMean ? "mean" : state.layer,
      layer: state.blockMean ? null : state.layer,
      head: state.head,
      heads: state.head === "mean" ? state.heads : [state.head],
      sinks: state.sinks,
      segments: state.segments,
    },
    tokens: run.tokens,
    // The query rows and key columns the matrix holds: every token, or a long run's window.
    rows: [row0, row0 + size],
    cols: [col0, col0 + size],
    matrix: Array.from({ length: size }, (_, row) => Array.from(matrix.subarray(row * size, (row + 1) * size), cell)),
    sink: sink === null ? null : Array.from(sink),
    pooled,
  };
}

export function saveJSON(view, name) {
  download(JSON.stringify(view, null, 1), `${name}.json`, "application/json");
}

// One cell of every CSV the page writes, by the rule of the class's answers (app/classroom/classes.py,
// csv_cell, where it is explained): numbers as they are; text with a ' before a leading = + - @, tab or
// carriage return (after any spaces), so a spreadsheet never runs it as a formula; quoted where it must be.
export function csvCell(value) {
  if (typeof value === "number") return String(value);
  const text = /^ *[=+\-@\t\r]/.test(value) ? `'${value}` : value;
  return /[",\n\r]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

// The same as a table: rows are queries, columns keys; a cell the view leaves out is empty; with the sink
// tokens hidden, a last column holds each row's weight on them.
export function saveCSV(view, name) {
  const sink = view.sink === null ? [] : [`sink: ${view.view.measure_name} on the hidden special tokens`];
  const lines = [
    csvCell(`# prompt: ${view.text.replace(/[\r\n]+/g, " ")}`),
    csvCell(`# model: ${view.model}; mask: ${view.mask}; view: ${view.view.name}; each cell: ${view.view.measure_name}; special tokens: ${view.view.sinks}; segments: ${view.view.segments}; rows are queries, columns keys`),
    ["query \\ key", ...view.tokens.slice(...view.cols).map((token) => `${token.index}:${token.text}`), ...sink].map(csvCell).join(","),
    ...view.matrix.map((row, offset) => {
      const index = view.rows[0] + offset;
      return [`${index}:${view.tokens[index].text}`, ...row.map((value) => value ?? ""), ...(view.sink === null ? [] : [view.sink[index]])].map(csvCell).join(",");
    }),
  ];
  download(`${lines.join("\n")}\n`, `${name}.csv`, "text/csv");
}

// A table of numbers as CSV: comment lines first (each one cell), then the rows, every cell as saveCSV's.
export function saveRows(about, rows, name) {
  const lines = [...about.map(csvCell), ...rows.map((row) => row.map(csvCell).join(","))];
  download(`${lines.join("\n")}\n`, `${name}.csv`, "text/csv");
}
