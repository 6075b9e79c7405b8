// Switching heads off: their context is zeroed before W_O and the model runs again. What changes, and
// from which block on, is measured against the original run.

import * as api from "../api.js";
import { el, fixed } from "../format.js";
import { blockBars, stageChart } from "./charts.js";
import { stageTable } from "./stages.js";
import { fillResult } from "./result.js";

const switchedOff = new Set(); // "layer:head", kept while the page lives so a teacher can build it up

export function renderAblation(container, { run, text, token, model }) {
  const toggles = el("div", { class: "ablation-grid", style: `--heads:${model.heads}`, role: "group", "aria-label": "Heads to switch off" });
  toggles.append(el("span"));
  for (let head = 0; head < model.heads; head += 1) toggles.append(el("span", { class: "grid-label" }, `h${head}`));
  for (let layer = 0; layer < model.layers; layer += 1) {
    toggles.append(el("span", { class: "grid-label" }, `block ${layer}`));
    for (let head = 0; head < model.heads; head += 1) {
      const key = `${layer}:${head}`;
      const toggle = el("button", {
        type: "button",
        class: "ablation-toggle",
        "aria-pressed": String(switchedOff.has(key)),
        "aria-label": `Switch off block ${layer}, head ${head}`,
        dataset: { layer: String(layer), head: String(head) },
      });
      toggle.addEventListener("click", () => {
        if (switchedOff.has(key)) switchedOff.delete(key);
        else switchedOff.add(key);
        toggle.setAttribute("aria-pressed", String(switchedOff.has(key)));
      });
      toggles.append(toggle);
    }
  }
  const go = el("button", { type: "button", id: "ablation-run" }, "Run again with these heads off");
  const result = el("div", { class: "lesson-result", id: "ablation-result", "aria-live": "polite" });
  go.addEventListener("click", () => rerun(result, run, text, token, model));
  container.replaceChildren(
    el("p", { class: "hint" }, "Click heads to switch them off (their 32 numbers per token are zeroed before W_O), then run again. Blocks before the first switched-off head cannot change."),
    toggles,
    go,
    result,
  );
}

async function rerun(result, run, text, token, model) {
  const ablate = [...switchedOff].map((key) => key.split(":").map(Number));
  const index = token ?? 0;
  await fillResult(result, `Running with ${ablate.length} heads off…`, async () => {
    const ablated = await api.analyze({ text, mask: run.mask, pooling: run.pooling, ablate, prompt: run.prompt ?? "" });
    const [offLayer, offHead] = ablate[0];
    const [compared, off] = await Promise.all([
      api.compare(run.run_id, ablated.run_id, index, index),
      api.query(ablated.run_id, offLayer, offHead, index),
    ]);
    const chart = el("div", { class: "lesson-chart", role: "img", "aria-label": "Cosine to the original run per stage" });
    const change = el("div", { class: "lesson-chart", role: "img", "aria-label": "Mean change of attention per block" });
    result.replaceChildren(
      el(
        "p",
        { class: "caption", dataset: { field: "summary" } },
        `${ablate.length} heads off. The sentence vector's cosine to the original: `,
        el("strong", { dataset: { field: "pooled-cosine", value: String(compared.pooled_cosine) } }, fixed(compared.pooled_cosine)),
        `; “${run.tokens[index].label}” after block ${model.layers - 1}: `,
        el("strong", {}, fixed(compared.cosines.at(-1))),
        ".",
      ),
      switchedOffHead(off, run.tokens[index].label),
      el("div", { class: "lesson-pair" }, chart, stageTable(compared)),
      el("h3", {}, "How much each block's attention moved: mean |A_original − A_ablated|"),
      change,
    );
    result.dataset.attentionChange = JSON.stringify(compared.attention_change); // with the numbers, before the charts
    await Promise.all([
      stageChart(chart, compared.stages, [{ name: run.tokens[index].label, values: compared.cosines }]),
      blockBars(change, compared.attention_change, "mean |ΔA|"),
    ]);
  });
}

// What a switched-off head still computes, and what W_O gets from it: the worked example's last two steps.
function switchedOffHead(numbers, tokenText) {
  const first = (vector) => `${vector.slice(0, 4).map((value) => fixed(value)).join(", ")} …`;
  return el(
    "p",
    { class: "caption", dataset: { field: "ablated-head", context: JSON.stringify(numbers.context), toOutput: JSON.stringify(numbers.context_to_output) } },
    `Block ${numbers.layer}, head ${numbers.head} is off: for “${tokenText}” it still computes its context, weights · V = [`,
    el("span", { class: "math" }, first(numbers.context)),
    "], but W_O receives [",
    el("span", { class: "math" }, first(numbers.context_to_output)),
    "] from it, so nothing it computes reaches the rest of the model.",
  );
}
