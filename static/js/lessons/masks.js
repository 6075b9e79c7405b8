// Bidirectional against causal: the one structural difference between an embedding model (every token
// sees every token) and a chat model's decoder (each token sees only itself and what came before).

import * as api from "../api.js";
import { el, fixed } from "../format.js";
import { blockBars, stageChart } from "./charts.js";
import { stageTable } from "./stages.js";
import { fillResult } from "./result.js";

export function renderMasks(container, { run, text, token, model }) {
  if (model.masks.length === 1) {
    const sliding = model.windows.flatMap((window, layer) => (window === null ? [] : [`block ${layer}: ${window}`]));
    const windows = sliding.length
      ? ` ${sliding.length === model.layers ? "Its blocks" : "Some of its blocks"} also slide a window (${sliding.join(", ")}): there row i is zero before column i − window + 1 as well, so a token sees itself and the window − 1 tokens before it.`
      : "";
    container.replaceChildren(
      el("p", { class: "hint", id: "masks-decoder" }, `${model.name} is a causal decoder (${model.family}): it was trained to read each token with only the ones before it, so it is read with the causal mask only. Every row i of its attention is zero after column i: see the heatmap.${windows} Load an encoder (e.g. MiniLM) to compare the two masks on the same weights.`),
    );
    return;
  }
  const go = el("button", { type: "button", id: "masks-run" }, "Run this prompt under both masks");
  const result = el("div", { class: "lesson-result", id: "masks-result", "aria-live": "polite" });
  container.replaceChildren(
    el(
      "p",
      { class: "hint" },
      `The same weights, two masks: bidirectional (how ${model.name} was trained, and how embedding models read) and causal (how a GPT-style decoder reads: row i of every attention matrix is zero after column i).`,
    ),
    go,
    result,
  );
  go.addEventListener("click", async () => {
    if (token === null) {
      result.replaceChildren(el("p", { class: "hint" }, "Select a token first."));
      return;
    }
    await fillResult(result, "Running both…", async () => {
      const runs = await Promise.all(
        ["bidirectional", "causal"].map((mask) => api.analyze({ text, mask, pooling: run.pooling, prompt: run.prompt ?? "" })),
      );
      const compared = await api.compare(runs[0].run_id, runs[1].run_id, token, token);
      await show(result, compared, run.tokens[token], model);
    });
  });
}

async function show(result, compared, token, model) {
  const chart = el("div", { class: "lesson-chart", role: "img", "aria-label": "Cosine between the bidirectional and causal vectors" });
  const change = el("div", { class: "lesson-chart", role: "img", "aria-label": "Mean change of attention per block" });
  result.replaceChildren(
    el(
      "p",
      { class: "caption", dataset: { field: "summary" } },
      `“${token.label}” (token ${token.index}) under both masks: cosine after block ${model.layers - 1} `,
      el("strong", {}, fixed(compared.cosines.at(-1))),
      "; the sentence vectors: ",
      el("strong", { dataset: { field: "pooled-cosine", value: String(compared.pooled_cosine) } }, fixed(compared.pooled_cosine)),
      ". Before block 0 nothing differs: the mask only acts inside attention.",
    ),
    el("div", { class: "lesson-pair" }, chart, stageTable(compared)),
    el("h3", {}, "Mean |A_bidirectional − A_causal| per block"),
    change,
  );
  await Promise.all([
    stageChart(chart, compared.stages, [{ name: token.label, values: compared.cosines }]),
    blockBars(change, compared.attention_change, "mean |ΔA|"),
  ]);
}
