// The sentence vector: the pooled numbers (hidden_size of them) and the same vector divided by its norm, and
// each module the model's sentence-transformers pipeline runs after the pooling (Dense, Normalize) with its shape.

import { el, fixed, plotFont } from "./format.js";
import { loadPlotly } from "./plotly.js";

const STRATEGIES = {
  mean: "mean of every token's final vector",
  cls: "the first token's final vector",
  last: "the last token's final vector (under the causal mask, the only one that has read the whole text)",
  max: "the largest value of each dimension over all tokens",
  mean_sqrt_len: "the sum of every token's final vector divided by √N",
  weighted_mean: "every token's final vector weighted by its position 1, 2, …, N",
};

// The numbers, then the Plotly chart (drawn only once the panel is open: it is slow to build).
export function renderPooled(container, pooled, model, tokens, pair = false) {
  const modules = pooled.stages.length > 1; // more than the pooling: the model's own sentence vector is the last stage's
  const chart = el("div", { class: "pooled-chart", role: "img", "aria-label": `Pooled vector and ${modules ? "the model's sentence vector" : "its normalised form"}, one bar per dimension` });
  container.replaceChildren(
    el(
      "p",
      { class: "caption" },
      `Pooling: `,
      el("strong", { dataset: { field: "strategy" } }, pooled.strategy),
      // A Pooling module that leaves the prompt out (include_prompt false) pools the text's tokens alone.
      ` (${STRATEGIES[pooled.strategy]}${model.sentence_modules[0]?.include_prompt === false && tokens.some((token) => token.prompt) ? ", the prompt's tokens left out" : ""}) → a 1×${model.hidden_size} vector with norm `,
      el("strong", { dataset: { field: "norm", value: String(pooled.norm) } }, fixed(pooled.norm)),
      modules ? "." : `; divided by that norm it has length 1: the sentence embedding used for search.`,
    ),
    ...(modules
      ? [
          el("p", { class: "caption" }, "The model's sentence-transformers modules after the transformer (modules.json), in order; the last one's vector is the sentence embedding used for search:"),
          el(
            "ol",
            { class: "pooled-stages", dataset: { field: "stages" } },
            ...pooled.stages.map((stage) =>
              el("li", { dataset: { module: stage.module, size: String(stage.vector.length), norm: String(stage.norm) } }, el("strong", {}, stage.title), ` → 1×${stage.vector.length}, norm ${fixed(stage.norm)}`),
            ),
          ),
        ]
      : []),
    // replaceChildren writes a null as the text "null": a child that is not there is left out.
    ...(pooled.tokens < tokens.length
      ? [
          el(
            "p",
            { class: "caption cut", dataset: { field: "pooled-tokens", value: String(pooled.tokens) } },
            `The model reads at most ${model.max_seq_length} tokens for its sentence vector (its max_seq_length), as sentence-transformers does: this one is pooled over ${pooled.tokens} of the ${tokens.length} tokens, a pass of its own over the input cut ${pair ? "from the longer sentence's end" : `after “${tokens[pooled.tokens - 2].label}” (token ${pooled.tokens - 2})`}. The other views show all ${tokens.length}.`,
          ),
        ]
      : []),
    chart,
  );
  return drawChart(chart, pooled, model, modules ? pooled.stages.at(-1) : null);
}

export const pooledView = {
  id: "pooled",
  follows: ["run", "present"],
  shown: (state) => state.panel === "pooled",
  load: (state, lab) => lab.numbers().pooled(state.run.pooled),
  render: (state, pooled, lab) => renderPooled(document.getElementById("pooled"), pooled, lab.model, state.run.tokens, Boolean(state.run.text_pair)),
};

// last: the model's last module's stage, drawn in place of the normalised pooling where it has modules.
async function drawChart(chart, pooled, model, last) {
  const dims = [...pooled.vector.keys()];
  const second = last ? { y: last.vector, name: "sentence vector", axis: `dimension (0–${last.vector.length - 1})`, title: "sentence vector" } : { y: pooled.normalized, name: "normalised", axis: `dimension (0–${model.hidden_size - 1})`, title: "÷ norm" };
  (await loadPlotly()).react(
    chart,
    [
      { type: "bar", x: dims, y: pooled.vector, name: "pooled", marker: { color: "#1f77b4" }, hovertemplate: "dim %{x}: %{y:.4f}<extra>pooled</extra>" },
      { type: "bar", x: [...second.y.keys()], y: second.y, name: second.name, marker: { color: "#ff7f0e" }, xaxis: "x2", yaxis: "y2", hovertemplate: `dim %{x}: %{y:.4f}<extra>${second.name}</extra>` },
    ],
    {
      grid: { rows: 2, columns: 1, pattern: "independent" },
      height: 360,
      margin: { l: 50, r: 10, t: 10, b: 40 },
      showlegend: true,
      legend: { orientation: "h", y: 1.08 },
      xaxis2: { title: { text: second.axis } },
      yaxis: { title: { text: "pooled" } },
      yaxis2: { title: { text: second.title } },
      bargap: 0,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: plotFont(),
    },
    { displaylogo: false, responsive: true },
  );
}
