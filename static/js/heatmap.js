// One attention matrix as a Plotly heatmap: rows are queries (who looks), columns keys (who is looked at).

import { plotFont, plotlyText } from "./format.js";

const MAX_HOVER_LABELS = 200; // beyond this a per-cell label array costs more than it helps

// Integer axes with tick text: Plotly would merge repeated category labels (two "the"s).
function ticks(labels) {
  const step = Math.max(1, Math.ceil(labels.length / 48));
  const tickvals = [];
  for (let index = 0; index < labels.length; index += step) tickvals.push(index);
  return { tickvals, ticktext: tickvals.map((index) => plotlyText(labels[index])) };
}

const WHITE_TO_BLUE = [[0, "#ffffff"], [0.5, "#6baed6"], [1, "#08306b"]];

export function renderHeatmap(node, { matrix, labels, selected, title, onSelect, colorscale = WHITE_TO_BLUE, zmid = null }) {
  const n = labels.length;
  const z = Array.from({ length: n }, (_, row) => Array.from(matrix.subarray(row * n, (row + 1) * n)));
  const safe = labels.map(plotlyText);
  const trace = {
    type: "heatmap",
    z,
    x: [...Array(n).keys()],
    y: [...Array(n).keys()],
    colorscale,
    zmin: zmid === null ? 0 : undefined,
    zmid: zmid === null ? undefined : zmid,
    colorbar: { title: { text: "weight" }, thickness: 12 },
    hovertemplate:
      n <= MAX_HOVER_LABELS
        ? "%{text}<br>A[%{y},%{x}] = %{z:.4f}<extra></extra>"
        : "query %{y} → key %{x}<br>A[%{y},%{x}] = %{z:.4f}<extra></extra>",
    text: n <= MAX_HOVER_LABELS ? z.map((row, i) => row.map((_, j) => `${safe[i]} → ${safe[j]}`)) : undefined,
  };
  const size = Math.min(640, Math.max(320, 40 + n * 22));
  const layout = {
    title: { text: plotlyText(title), x: 0, xanchor: "left", y: 0.99, yanchor: "top" },
    height: size + 60,
    margin: { l: 90, r: 10, t: 40, b: 20 },
    xaxis: { ...ticks(labels), side: "bottom", tickangle: -60, title: { text: "key: attended to" }, automargin: true },
    yaxis: { ...ticks(labels), autorange: "reversed", title: { text: "query: attending" }, automargin: true },
    shapes:
      selected === null
        ? []
        : [{ type: "rect", xref: "paper", x0: 0, x1: 1, y0: selected - 0.5, y1: selected + 0.5, line: { color: "#d62728", width: 3 } }],
    paper_bgcolor: "rgba(0,0,0,0)",
    font: plotFont(),
  };
  Plotly.react(node, [trace], layout, {
    displaylogo: false,
    responsive: true,
    modeBarButtonsToRemove: ["select2d", "lasso2d"],
    toImageButtonOptions: { filename: title.replace(/[^\w-]+/g, "-") },
  });
  node.dataset.selectedRow = selected === null ? "" : String(selected);
  if (!node.dataset.clickBound) {
    node.on("plotly_click", (event) => node.onSelectToken?.(event.points[0].y));
    node.dataset.clickBound = "true";
  }
  node.onSelectToken = onSelect;
  node.setAttribute("aria-label", `${title}. ${n} by ${n}; row ${selected === null ? "none" : selected} highlighted.`);
}
