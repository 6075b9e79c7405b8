// A comparison's numbers as a table beside its chart: every stage, its cosine, exactly.

import { el, fixed } from "../format.js";

export function stageTable(compared, field = "cosines") {
  return el(
    "table",
    { class: "numbers-table", dataset: { field } },
    el("thead", {}, el("tr", {}, el("th", {}, "stage"), el("th", {}, "cosine"))),
    el(
      "tbody",
      {},
      ...compared.stages.map((stage, index) =>
        el("tr", { dataset: { stage, value: String(compared.cosines[index]) } }, el("td", {}, stage), el("td", {}, fixed(compared.cosines[index]))),
      ),
    ),
  );
}
