// A − B: two runs of the same length (two prompts, or one prompt under both masks) cell by cell, on a
// colour scale that diverges from white at zero. Different lengths get a message, not a wrong picture.

import * as api from "../api.js";
import { el, fixed } from "../format.js";
import { Heatmap } from "../heatmap.js";
import { fillResult } from "./result.js";

export function renderDifference(container, { text, model, current }) {
  const field = (id, value, label) => el("input", { type: "text", id, value, "aria-label": label });
  const maskPicker = (id, value, label) => {
    const select = el("select", { id, "aria-label": label }, new Option("bidirectional", "bidirectional"), new Option("causal", "causal"));
    select.value = value;
    return select;
  };
  const textA = field("difference-a", text, "Prompt A");
  const textB = field("difference-b", text, "Prompt B");
  const maskA = maskPicker("difference-mask-a", "bidirectional", "Mask A");
  const maskB = maskPicker("difference-mask-b", "causal", "Mask B");
  const result = el("div", { class: "lesson-result", id: "difference-result", "aria-live": "polite" });
  const form = el(
    "form",
    { class: "lesson-form" },
    el("label", {}, "A ", textA, " ", maskA),
    el("label", {}, "B ", textB, " ", maskB),
    el("button", { type: "submit", id: "difference-run" }, "Show A − B"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    await fillResult(result, "Running both…", async () => {
      const [a, b] = await Promise.all([
        api.analyze({ text: textA.value, mask: maskA.value }),
        api.analyze({ text: textB.value, mask: maskB.value }),
      ]);
      await show(result, a, b, current(), model);
    });
  });
  container.replaceChildren(
    el("p", { class: "hint" }, "Subtract one run's attention from another's, for the block and head chosen above: red where A attends more, blue where B does."),
    form,
    result,
  );
}

async function headWeights(run, layer, head, model) {
  if (head !== "mean") return (await api.attention(run.run_id, { dtype: "float32", layer, head })).values;
  const block = (await api.attention(run.run_id, { dtype: "float32", layer })).values;
  const cells = block.length / model.heads;
  return Float32Array.from({ length: cells }, (_, cell) => {
    let sum = 0;
    for (let h = 0; h < model.heads; h += 1) sum += block[h * cells + cell];
    return sum / model.heads;
  });
}

async function show(result, a, b, { layer, head }, model) {
  if (a.tokens.length !== b.tokens.length) {
    result.replaceChildren(
      el(
        "p",
        { class: "error", dataset: { field: "mismatch" } },
        `A has ${a.tokens.length} tokens and B has ${b.tokens.length}: a cell-by-cell difference needs the same number. Use prompts of the same length, or one prompt under both masks.`,
      ),
    );
    return;
  }
  const [weightsA, weightsB] = await Promise.all([headWeights(a, layer, head, model), headWeights(b, layer, head, model)]);
  const difference = weightsA.map((value, cell) => value - weightsB[cell]);
  const largest = difference.reduce((max, value) => Math.max(max, Math.abs(value)), 0);
  const box = el("div", { class: "lesson-map", id: "difference-map" });
  result.replaceChildren(
    el("p", { class: "caption", dataset: { field: "largest", value: String(largest) } }, `Largest |A − B| in this head: `, el("strong", {}, fixed(largest))),
    box,
  );
  const labels = a.tokens.map((token, index) => (token.text === b.tokens[index].text ? token.text : `${token.text}/${b.tokens[index].text}`));
  const name = head === "mean" ? `block ${layer}, all heads averaged` : `block ${layer}, head ${head}`;
  new Heatmap(box, () => {}, { signed: true, valueName: "A−B" }).draw({ matrix: difference, labels, selected: null, title: `A − B: ${name}` });
}
