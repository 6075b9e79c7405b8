// The pipeline around attention for one token: embedding lookup, + position, + token type, LayerNorm,
// then each block's residual stream and FFN, with the shapes the model has.

import { el, fixed, norm, vectorStrip } from "./format.js";

const TOP_NEURONS = 5;

function stage(title, shape, ...body) {
  return el("div", { class: "stage-row" }, el("h3", {}, title, el("span", { class: "shape" }, shape)), ...body);
}

function row(values, label, field) {
  return el(
    "div",
    { class: "row", dataset: { field } },
    vectorStrip(values, { label }),
    el("span", { class: "row-note" }, `‖·‖ = ${fixed(norm(values), 3)} · first: ${values.slice(0, 3).map((v) => fixed(v, 3)).join(", ")} …`),
  );
}

// The k largest values with their indices, in one pass: a full sort of 1536 per block costs a click's budget.
function topK(values, k) {
  const best = [];
  values.forEach((value, index) => {
    if (best.length === k && value <= best[k - 1].value) return;
    best.push({ index, value });
    best.sort((a, b) => b.value - a.value);
    best.length = Math.min(best.length, k);
  });
  return best;
}

export function renderPipeline(container, { tokens, selected, trace, model }) {
  if (selected === null || !trace) {
    container.replaceChildren(el("p", { class: "hint" }, selected === null ? "Select a token to follow it." : "Loading…"));
    return;
  }
  const token = tokens[selected];
  const h = model.hidden_size;
  const e = trace.embeddings;
  const blocks = trace.layers.map((layer) => {
    const neurons = topK(layer.ffn_intermediate, TOP_NEURONS);
    return el(
      "tr",
      { dataset: { layer: String(layer.layer) } },
      el("th", { scope: "row" }, `block ${layer.layer}`),
      el("td", {}, fixed(norm(layer.attention_output), 3)),
      el("td", {}, fixed(norm(layer.resid_mid), 3)),
      el("td", { class: "neurons" }, neurons.map(({ index, value }) => `#${index}: ${fixed(value, 3)}`).join(" · ")),
      el("td", {}, fixed(norm(layer.ffn_output), 3)),
      el("td", {}, vectorStrip(layer.output, { label: `block ${layer.layer} output`, height: 14 }), ` ${fixed(norm(layer.output), 3)}`),
    );
  });
  container.replaceChildren(
    stage(
      `“${token.text}” → id ${token.id} → row ${token.id} of the word-embedding table`,
      `${model.vocab_size.toLocaleString("en")}×${h} table → 1×${h}`,
      row(e.word, "word embedding row", "word"),
    ),
    stage(`+ position embedding for position ${selected}`, `512×${h} table → 1×${h}`, row(e.position, "position embedding", "position")),
    stage(`+ token-type embedding (segment ${token.token_type})`, `2×${h} table → 1×${h}`, row(e.token_type, "token type embedding", "token_type")),
    stage("= the sum", `1×${h}`, row(e.sum, "sum of embeddings", "sum")),
    stage("LayerNorm: the input to block 0", `1×${h} (of N×${h})`, row(e.normalized, "normalised embedding", "normalized")),
    stage(
      `${model.layers} blocks: attention, add & LayerNorm, FFN ${h} → ${model.intermediate_size} (GELU) → ${h}, add & LayerNorm`,
      `N×${h} in, N×${h} out`,
      el(
        "div",
        { class: "scroll-x" },
        el(
        "table",
        { class: "blocks" },
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            el("th", {}, "block"),
            el("th", {}, `‖attention output‖ (1×${h})`),
            el("th", {}, `‖LN(x + attention)‖`),
            el("th", {}, `most active FFN neurons (of ${model.intermediate_size}, after GELU)`),
            el("th", {}, `‖FFN output‖ (1×${h})`),
            el("th", {}, `block output (1×${h}) and its norm`),
          ),
        ),
        el("tbody", {}, ...blocks),
        ),
      ),
    ),
  );
}

export const pipelineView = {
  id: "pipeline",
  follows: ["run", "token"],
  shown: (state) => state.panel === "pipeline",
  load: ({ token }, lab) => (token === null ? null : lab.numbers().trace(token)),
  render({ run, token }, trace, lab) {
    renderPipeline(document.getElementById("pipeline"), { tokens: run.tokens, selected: token, trace, model: lab.model });
  },
};
