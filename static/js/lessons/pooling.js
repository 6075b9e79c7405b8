// Pooling and prefixes: the same prompt pooled three ways, how alike those vectors are, and how far an
// instruction prefix such as "query: " moves the sentence vector.

import * as api from "../api.js";
import { el, fixed } from "../format.js";
import { fillResult } from "./result.js";

const POOLINGS = {
  mean: "the mean of all rows (mean)",
  cls: "the first token's row (cls)",
  max: "the largest value of each column (max)",
  last: "the last token's row, the only one that read the whole text under the causal mask (last)",
  mean_sqrt_len: "the sum of all rows divided by √N (mean_sqrt_len)",
  weighted_mean: "the rows weighted by their positions 1, 2, …, N (weighted_mean)",
};

export function renderPooling(container, { text, run, model }) {
  const prefix = el("input", { type: "text", id: "pooling-prefix", value: "query: ", "aria-label": "Instruction prefix" });
  const result = el("div", { class: "lesson-result", id: "pooling-result", "aria-live": "polite" });
  // A model with prompts of its own (config_sentence_transformers.json) offers them in place of the prefix.
  const names = Object.keys(model.prompts);
  const prompt = el("select", { id: "pooling-prompt", "aria-label": "Or one of the model's prompts" }, new Option("the prefix", ""), ...names.map((name) => new Option(`its “${name}” prompt`, name)));
  const form = el("form", { class: "lesson-form" }, el("label", {}, "Instruction prefix ", prefix), ...(names.length ? [el("label", {}, "or ", prompt)] : []), el("button", { type: "submit" }, "Compare"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    await fillResult(result, "Pooling…", async () => show(result, await api.pooling({ text, mask: run.mask, prefix: prefix.value, prompt: prompt.value || null })));
  });
  container.replaceChildren(
    el("p", { class: "hint" }, `${model.poolings.length} ways to make one vector of the last hidden states, N×${model.hidden_size}: ${model.poolings.map((name) => POOLINGS[name]).join(", ")}. ${model.name} pools with ${model.default_pooling} by default.`),
    form,
    result,
  );
  form.requestSubmit();
}

function show(result, pooled) {
  result.replaceChildren(
    el(
      "table",
      { class: "numbers-table", dataset: { field: "strategies" } },
      el("thead", {}, el("tr", {}, el("th", {}, "pooling"), el("th", {}, "norm"), el("th", {}, "first numbers of the normalised vector"))),
      el(
        "tbody",
        {},
        ...Object.entries(pooled.strategies).map(([name, vector]) =>
          el(
            "tr",
            { dataset: { strategy: name, norm: String(vector.norm) } },
            el("th", { scope: "row" }, name),
            el("td", {}, fixed(vector.norm)),
            el("td", { class: "math" }, `${vector.normalized.slice(0, 4).map((v) => fixed(v)).join(", ")} …`),
          ),
        ),
      ),
    ),
    el(
      "table",
      { class: "numbers-table", dataset: { field: "cosines" } },
      el("thead", {}, el("tr", {}, el("th", {}, "pair"), el("th", {}, "cosine"))),
      el(
        "tbody",
        {},
        ...Object.entries(pooled.cosines).map(([pair, value]) =>
          el("tr", { dataset: { pair, value: String(value) } }, el("td", {}, pair.replace("/", " vs ")), el("td", {}, fixed(value))),
        ),
      ),
    ),
    el(
      "p",
      { class: "caption", dataset: { field: "prefix", value: String(pooled.prefix.cosine) } },
      `With the prefix (“${pooled.prefix.text}”), the sentence vector's cosine to the one without: `,
      el("strong", {}, fixed(pooled.prefix.cosine)),
      ". Retrieval models trained with such prefixes expect them; a model trained without them still has its vector moved by the words.",
    ),
    // replaceChildren writes a null as the text "null": a child that is not there is left out.
    ...(pooled.whole_input.tokens > pooled.strategies.mean.tokens
      ? [
          el(
            "p",
            { class: "caption", dataset: { field: "whole-input", value: String(pooled.whole_input.cosine) } },
            `The model pools only its first ${pooled.strategies.mean.tokens} tokens (its max_seq_length). Pooled over all ${pooled.whole_input.tokens} tokens the lab read, the vector would be another one, not the model's own: cosine `,
            el("strong", {}, fixed(pooled.whole_input.cosine)),
            " to the real sentence vector.",
          ),
        ]
      : []),
  );
}
