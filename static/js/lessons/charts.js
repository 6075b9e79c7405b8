// Small Plotly charts the experiments share: a value per stage of the pipeline, a value per block.

import { plotFont } from "../format.js";
import { loadPlotly } from "../plotly.js";

const LAYOUT = { height: 260, margin: { l: 60, r: 10, t: 10, b: 90 }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)" };
const CONFIG = { displaylogo: false, responsive: true };

// series: [{name, values}] over the stages (word embedding, embeddings, block 0 … block 5).
export async function stageChart(node, stages, series, yTitle = "cosine") {
  (await loadPlotly()).react(
    node,
    series.map(({ name, values }) => ({
      type: "scatter",
      mode: "lines+markers",
      name,
      x: stages,
      y: values,
      hovertemplate: "%{x}: %{y:.4f}<extra></extra>",
    })),
    { ...LAYOUT, font: plotFont(), yaxis: { title: { text: yTitle } }, showlegend: series.length > 1 },
    CONFIG,
  );
}

export async function blockBars(node, values, yTitle) {
  (await loadPlotly()).react(
    node,
    [{ type: "bar", x: values.map((_, block) => `block ${block}`), y: values, hovertemplate: "%{x}: %{y:.5f}<extra></extra>" }],
    { ...LAYOUT, height: 220, margin: { ...LAYOUT.margin, b: 40 }, font: plotFont(), yaxis: { title: { text: yTitle } } },
    CONFIG,
  );
}
