// The sentence vector: the pooled numbers (hidden_size of them) and the same vector divided by its norm.

import { el, fixed, plotFont } from "./format.js";
import { loadPlotly } from "./plotly.js";

const STRATEGIES = {
  mean: "mean of every token's final vector",
  cls: "the first token's final vector",
  last: "the last token's final vector (under the causal mask, the only one that has read the whole text)",
  max: "the largest value of each dimension over all tokens",
};

// The numbers, then the Plotly chart (drawn only once the panel is open: it is slow to build).
export function renderPooled(container, pooled, model, tokens, pair = false) {
  const chart = el("div", { class: "pooled-chart", role: "img", "aria-label": "Pooled vector and its normalised form, one bar per dimension" });
  container.replaceChildren(
    el(
      "p",
      { class: "caption" },
      `Pooling: `,
      el("strong", { dataset: { field: "strategy" } }, pooled.strategy),
      ` (${STRATEGIES[pooled.strategy]}) → a 1×${model.hidden_size} vector with norm `,
      el("strong", { dataset: { field: "norm", value: String(pooled.norm) } }, fixed(pooled.norm)),
      `; divided by that norm it has length 1: the sentence embedding used for search.`,
    ),
    // replaceChildren writes a null as the text "null": a child that is not there is left out.
    ...(pooled.tokens < tokens.length
      ? [
          el(
            "p",
            { class: "caption cut", dataset: { field: "pooled-tokens", value: String(pooled.tokens) } },
            `The model reads at most ${model.max_seq_length} tokens for its sentence vector (its max_seq_length), as sentence-transformers does: this one is pooled over ${pooled.tokens} of the ${tokens.length} tokens, a pass of its own over the input cut ${pair ? "from the longer sentence's end" : `after “${tokens[pooled.tokens - 2].text}” (token ${pooled.tokens - 2})`}. The other views show all ${tokens.length}.`,
          ),
        ]
      : []),
    chart,
  );
  return drawChart(chart, pooled, model);
}

export const pooledView = {
  id: "pooled",
  follows: ["run", "present"],
  shown: (state) => state.panel === "pooled",
  load: (state, lab) => lab.numbers().pooled(state.run.pooled),
  render: (state, pooled, lab) => renderPooled(document.getElementById("pooled"), pooled, lab.model, state.run.tokens, Boolean(state.run.text_pair)),
};

async function drawChart(chart, pooled, model) {
  const dims = [...pooled.vector.keys()];
  (await loadPlotly()).react(
    chart,
    [
      { type: "bar", x: dims, y: pooled.vector, name: "pooled", marker: { color: "#1f77b4" }, hovertemplate: "dim %{x}: %{y:.4f}<extra>pooled</extra>" },
      { type: "bar", x: dims, y: pooled.normalized, name: "normalised", marker: { color: "#ff7f0e" }, xaxis: "x2", yaxis: "y2", hovertemplate: "dim %{x}: %{y:.4f}<extra>normalised</extra>" },
    ],
    {
      grid: { rows: 2, columns: 1, pattern: "independent" },
      height: 360,
      margin: { l: 50, r: 10, t: 10, b: 40 },
      showlegend: true,
      legend: { orientation: "h", y: 1.08 },
      xaxis2: { title: { text: `dimension (0–${model.hidden_size - 1})` } },
      yaxis: { title: { text: "pooled" } },
      yaxis2: { title: { text: "÷ norm" } },
      bargap: 0,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: plotFont(),
    },
    { displaylogo: false, responsive: true },
  );
}
