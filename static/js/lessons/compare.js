// Same id, different meaning: one token id in two prompts reads the same embedding row, then the
// blocks pull the two vectors apart. Both attention maps are shown for the chosen head.

import * as api from "../api.js";
import { el, fixed } from "../format.js";
import { Heatmap } from "../heatmap.js";
import { stageChart } from "./charts.js";
import { stageTable } from "./stages.js";
import { fillResult } from "./result.js";

export function renderCompare(container, { model, current }) {
  const promptA = el("input", { type: "text", id: "compare-a", value: "the river bank", "aria-label": "Prompt A" });
  const promptB = el("input", { type: "text", id: "compare-b", value: "the bank approved the loan", "aria-label": "Prompt B" });
  const go = el("button", { type: "submit", id: "compare-run" }, "Compare");
  const result = el("div", { class: "lesson-result", id: "compare-result", "aria-live": "polite" });
  const form = el(
    "form",
    { class: "lesson-form" },
    el("label", {}, "Prompt A ", promptA),
    el("label", {}, "Prompt B ", promptB),
    go,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    await fillResult(result, "Running both prompts…", async () => {
      const [a, b] = await Promise.all([api.analyze({ text: promptA.value }), api.analyze({ text: promptB.value })]);
      const { layer, head } = current();
      await showShared(result, a, b, { model, layer, head });
    });
  });
  container.replaceChildren(
    el("p", { class: "hint" }, "Type two prompts that share a word. The same token id reads the same row of the embedding table; watch the blocks give it two meanings."),
    form,
    result,
  );
}

function sharedTokens(a, b) {
  const inB = new Map(b.tokens.filter((t) => !t.special).map((t) => [t.id, t.index]));
  return a.tokens.filter((t) => !t.special && inB.has(t.id)).map((t) => ({ token: t, other: inB.get(t.id) }));
}

async function showShared(result, a, b, view) {
  const shared = sharedTokens(a, b);
  if (shared.length === 0) {
    result.replaceChildren(el("p", { class: "hint" }, "The two prompts share no token id: give them a word in common."));
    return;
  }
  const picker = el(
    "select",
    { id: "compare-token", "aria-label": "Shared token" },
    ...shared.map(({ token, other }, position) => new Option(`“${token.text}” (id ${token.id}): A token ${token.index}, B token ${other}`, String(position))),
  );
  const longest = shared.reduce((best, entry, position) => (entry.token.text.length > shared[best].token.text.length ? position : best), 0);
  picker.value = String(longest);
  const details = el("div");
  const draw = () => showToken(details, a, b, shared[Number(picker.value)], view);
  picker.addEventListener("change", draw);
  result.replaceChildren(el("label", {}, "Shared token ", picker), details);
  await draw();
}

async function showToken(details, a, b, { token, other }, { model, layer, head }) {
  const compared = await api.compare(a.run_id, b.run_id, token.index, other);
  const chart = el("div", { class: "lesson-chart", role: "img", "aria-label": "Cosine between the two vectors at each stage" });
  const maps = el("div", { class: "lesson-maps" });
  details.replaceChildren(
    el(
      "p",
      { class: "caption", dataset: { field: "summary" } },
      `“${token.text}” reads row ${token.id} of the ${model.vocab_size.toLocaleString("en")}×${model.hidden_size} table in both prompts: cosine `,
      el("strong", {}, fixed(compared.cosines[0])),
      `. After block ${model.layers - 1} the cosine is `,
      el("strong", {}, fixed(compared.cosines.at(-1))),
      `; the two sentence vectors: ${fixed(compared.pooled_cosine)}.`,
    ),
    el("div", { class: "lesson-pair" }, chart, stageTable(compared)),
    el("h3", {}, `Block ${layer}, head ${head === "mean" ? 0 : head}: where each “${token.text}” looks`),
    maps,
  );
  await stageChart(chart, compared.stages, [{ name: token.text, values: compared.cosines }]);
  const headIndex = head === "mean" ? 0 : head;
  const [rowsA, rowsB] = await Promise.all([
    api.attention(a.run_id, { dtype: "float32", layer, head: headIndex }),
    api.attention(b.run_id, { dtype: "float32", layer, head: headIndex }),
  ]);
  for (const [run, weights, selected, name] of [[a, rowsA, token.index, "A"], [b, rowsB, other, "B"]]) {
    const box = el("div", { class: "lesson-map", dataset: { prompt: name } });
    maps.append(box);
    new Heatmap(box, () => {}).draw({
      matrix: weights.values,
      labels: run.tokens.map((t) => t.label),
      selected,
      title: `Prompt ${name}: block ${layer}, head ${headIndex}`,
    });
  }
}
