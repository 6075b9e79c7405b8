// The pipeline around attention for one token: its embedding stages, then each block's residual stream
// and FFN, and, for a model with an LM head, the next tokens it predicts. What each stage is comes from
// the model (/api/model's activations): the page writes no family's formulas of its own.

import { blankNote } from "./blind.js";
import { missing, unavailableNote } from "./capabilities.js";
import { count, el, fixed, norm, vectorStrip } from "./format.js";

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

// Each embedding stage the model has, titled for this token, with its shape.
function embeddingStages(token, selected, embeddings, model) {
  const h = model.hidden_size;
  const titles = {
    word: [`“${token.label}” → id ${token.id} → row ${token.id} of the word-embedding table`, `${model.vocab_size.toLocaleString("en")}×${h} table → 1×${h}`],
    scaled: [`× √${h}: ${model.activations.scaled}`, `1×${h}`],
    // RoBERTa and MPNet keep rows for padding before the first position: token i reads row i + offset.
    position: [
      `+ position embedding for position ${selected}${model.position_offset ? ` (row ${selected + model.position_offset})` : ""}`,
      `${model.max_tokens + model.position_offset}×${h} table → 1×${h}`,
    ],
    token_type: [`+ token-type embedding (segment ${token.token_type})`, `token types×${h} table → 1×${h}`],
    sum: [`= ${model.activations.sum}`, `1×${h}`],
    normalized: [`${model.activations.normalized}`, `1×${h} (of N×${h})`],
  };
  const stages = Object.entries(embeddings).map(([name, values]) => stage(...titles[name], row(values, model.activations[name], name)));
  if (model.positions === "rotary") {
    stages.push(el("p", { class: "hint" }, `No position table: in every block each query and key is rotated by an angle that grows with its position (RoPE), so a score QKᵀ depends on how far apart two tokens are. The q and k the lab shows are the rotated ones.`));
  } else if (model.positions === "relative") {
    stages.push(el("p", { class: "hint" }, "Besides the position table, every head adds a learned bias for how far apart two tokens are to its scores (relative positions)."));
  }
  return stages;
}

function blocksTable(layers, model) {
  const h = model.hidden_size;
  const label = model.activations;
  // The block's activations, in the model's order (its activations list the embedding stages first).
  const columns = Object.keys(label).filter((name) => name in layers[0] && name !== "layer");
  const header = {
    attention_output: `‖attention output‖ (${label.attention_output}, 1×${h})`,
    resid_mid: `‖${label.resid_mid}‖`,
    ffn_intermediate: `most active FFN neurons (of ${model.intermediate_size}: ${label.ffn_intermediate})`,
    ffn_output: `‖FFN output‖ (1×${h})`,
    output: `block output (${label.output}, 1×${h}) and its norm`,
  };
  const cell = {
    ffn_intermediate: (values) => el("td", { class: "neurons" }, topK(values, TOP_NEURONS).map(({ index, value }) => `#${index}: ${fixed(value, 3)}`).join(" · ")),
    output: (values, layer) => el("td", {}, vectorStrip(values, { label: `block ${layer} output`, height: 14 }), ` ${fixed(norm(values), 3)}`),
  };
  const plain = (values) => el("td", {}, fixed(norm(values), 3));
  return el(
    "table",
    { class: "blocks" },
    el("thead", {}, el("tr", {}, el("th", {}, "block"), ...columns.map((name) => el("th", {}, header[name])))),
    el(
      "tbody",
      {},
      ...layers.map((layer) =>
        el("tr", { dataset: { layer: String(layer.layer) } }, el("th", { scope: "row" }, `block ${layer.layer}`), ...columns.map((name) => (cell[name] ?? plain)(layer[name], layer.layer))),
      ),
    ),
  );
}

function nextTokensStage(token, next, model) {
  return stage(
    `LM head: what the model would write after “${token.label}”`,
    `final norm · W_U${model.logit_softcapping ? ` → c·tanh(logit/c), c = ${model.logit_softcapping}` : ""} → softmax over the vocabulary`,
    el(
      "ol",
      { class: "next-tokens" },
      ...next.candidates.map((candidate) => el("li", {}, el("code", {}, candidate.token), ` ${fixed(100 * candidate.probability, 1)} % · logit ${fixed(candidate.logit, 3)}`)),
    ),
  );
}

export function renderPipeline(container, { tokens, selected, trace, next, model }) {
  if (selected === null || !trace) {
    container.replaceChildren(el("p", { class: "hint" }, selected === null ? "Select a token to follow it." : "Loading…"));
    return;
  }
  const token = tokens[selected];
  const h = model.hidden_size;
  const ffn = model.ffn_gated ? `${model.ffn} FFN ${h} → 2×${model.intermediate_size} → ${h}` : `FFN ${h} → ${model.intermediate_size} (${model.ffn}) → ${h}`;
  const order = model.normalization === "post-LN" ? `attention, add & LayerNorm, ${ffn}, add & LayerNorm` : `${model.normalization === "pre-RMSNorm" ? "RMSNorm" : "LayerNorm"} → attention, add; norm → ${ffn}, add`;
  container.replaceChildren(
    ...embeddingStages(token, selected, trace.embeddings, model),
    stage(`${count(model.layers, "block")}: ${order}`, `N×${h} in, N×${h} out`, el("div", { class: "scroll-x" }, blocksTable(trace.layers, model))),
    ...(next ? [nextTokensStage(token, next, model)] : []),
  );
}

export const pipelineView = {
  id: "pipeline",
  follows: ["run", "token"],
  shown: (state) => state.panel === "pipeline",
  blank: blankNote("pipeline"),
  load: ({ token }, lab) =>
    token === null || missing(lab.model, "pipeline") ? null : Promise.all([lab.numbers().trace(token), lab.model.next_tokens ? lab.numbers().nextTokens(token) : null]),
  render({ run, token }, loaded, lab) {
    if (missing(lab.model, "pipeline")) {
      document.getElementById("pipeline").replaceChildren(unavailableNote(lab.model, "pipeline"));
      return;
    }
    const [trace, next] = loaded ?? [null, null];
    renderPipeline(document.getElementById("pipeline"), { tokens: run.tokens, selected: token, trace, next, model: lab.model });
  },
};
