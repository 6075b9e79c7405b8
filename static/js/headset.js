// Which heads "all heads averaged" averages: a toggle per head, as bertviz has them. A click adds or
// removes a head (one always stays), a double-click keeps only that head.

import { HEAD_COLORS } from "./colors.js";
import { el } from "./format.js";

export function renderHeadSet(container, { head, heads }, total, onChange) {
  container.hidden = head !== "mean";
  if (container.hidden) return;
  const toggles = Array.from({ length: total }, (_, index) => {
    const on = heads.includes(index);
    const toggle = el(
      "button",
      {
        type: "button",
        class: "head-toggle",
        "aria-pressed": String(on),
        "aria-label": `head ${index} in the mean`,
        title: "Click to add or remove; double-click to keep only this head",
        style: `--c:${HEAD_COLORS[index % HEAD_COLORS.length]}`,
        dataset: { head: String(index) },
      },
      String(index),
    );
    toggle.addEventListener("click", (event) => {
      if (event.detail > 1) return; // the second click of a double-click
      const next = on ? heads.filter((other) => other !== index) : [...heads, index].sort((a, b) => a - b);
      if (next.length) onChange(next);
    });
    toggle.addEventListener("dblclick", () => onChange([index]));
    return toggle;
  });
  const all = el("button", { type: "button", class: "head-all" }, "all");
  all.addEventListener("click", () => onChange([...Array(total).keys()]));
  container.replaceChildren(el("span", { class: "field-label-inline" }, "Heads in the mean:"), ...toggles, all);
}
