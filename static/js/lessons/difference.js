// A − B: two runs of the same length (two prompts, or one prompt under both masks) cell by cell, in the
// view chosen above (its measure too), on a colour scale that diverges from white at zero. Different
// lengths get a message, not a wrong picture. The hint and the picture follow the view as it changes.

import * as api from "../api.js";
import { numbersOf } from "../data.js";
import { el, fixed } from "../format.js";
import { Heatmap } from "../heatmap.js";
import { viewName } from "../matrix.js";
import { measureOf } from "../measures.js";
import { fillResult } from "./result.js";

export function renderDifference(container, { text, model, current }) {
  const field = (id, value, label) => el("input", { type: "text", id, value, "aria-label": label });
  const maskPicker = (id, value, label) => {
    const select = el("select", { id, "aria-label": label }, ...model.masks.map((mask) => new Option(mask, mask)));
    select.value = value;
    return select;
  };
  const textA = field("difference-a", text, "Prompt A");
  const textB = field("difference-b", text, "Prompt B");
  const maskA = maskPicker("difference-mask-a", model.masks[0], "Mask A");
  const maskB = maskPicker("difference-mask-b", model.masks.at(-1), "Mask B");
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
      await show(result, { ...a, text: textA.value }, { ...b, text: textB.value }, current(), model);
    });
  });
  container.replaceChildren(el("p", { class: "hint", id: "difference-hint" }, hint(current(), model)), form, result);
}

function hint(view, model) {
  return `Subtract one run's ${measureOf(view.measure, view.sinks).name} from another's, cell by cell, in the view chosen above (now ${viewName(view, model)}): red where A is larger, blue where B is.`;
}

// The view above changed: the hint says the new one, and a difference on screen is drawn again for it.
export function moveDifference(container, { current, model }) {
  const line = container.querySelector("#difference-hint");
  if (!line) return;
  line.textContent = hint(current(), model);
  if (container.querySelector("#difference-map")) container.querySelector(".lesson-form").requestSubmit();
}

// Each run's matrix for the page's view: its head or head set, its block or the mean of all blocks, its
// sink filter (a segment filter needs a sentence pair, which these runs are not).
function viewMatrix(run, view, model) {
  return numbersOf(run.run_id).matrix({ ...view, segments: "all" }, run.tokens, model.layers);
}

async function show(result, a, b, view, model) {
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
  const [weightsA, weightsB] = await Promise.all([viewMatrix(a, view, model), viewMatrix(b, view, model)]);
  const difference = weightsA.matrix.map((value, cell) => value - weightsB.matrix[cell]);
  const largest = difference.reduce((max, value) => (Number.isNaN(value) ? max : Math.max(max, Math.abs(value))), 0);
  const box = el("div", { class: "lesson-map", id: "difference-map" });
  result.replaceChildren(
    el("p", { class: "caption", dataset: { field: "largest", value: String(largest) } }, `Largest |A − B| in this view: `, el("strong", {}, fixed(largest))),
    box,
  );
  const labels = a.tokens.map((token, index) => (token.label === b.tokens[index].label ? token.label : `${token.label}/${b.tokens[index].label}`));
  const subtracted = measureOf("difference", view.sinks);
  new Heatmap(box, () => {}, { signed: true, measure: subtracted }).draw({
    matrix: difference,
    labels,
    selected: null,
    title: `${subtracted.short}: ${viewName(view, model)}`,
    caption: `A: “${a.text}” (${a.mask}) − B: “${b.text}” (${b.mask})`,
  });
}
