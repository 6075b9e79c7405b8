// Nearest vocabulary rows: the selected token's vector after every stage, compared by cosine with every
// row of the (tied) 30,522×384 word-embedding table. A projection, not a trained prediction head.

import * as api from "../api.js";
import { el, fixed } from "../format.js";

export async function renderNearest(container, { run, token, model }) {
  if (token === null) {
    container.replaceChildren(el("p", { class: "hint" }, "Select a token to project it onto the vocabulary."));
    return;
  }
  const found = await api.nearest(run.run_id, token, 5);
  container.replaceChildren(
    el(
      "p",
      { class: "hint" },
      `“${run.tokens[token].label}” after each stage, against every row of the ${model.vocab_size.toLocaleString("en")}×${model.hidden_size} word-embedding table (MiniLM ties its input and output embeddings): the five rows with the highest cosine. This is a projection for intuition, not what the model predicts: MiniLM has no trained prediction head here.`,
    ),
    el(
      "table",
      { class: "numbers-table nearest", dataset: { field: "nearest" } },
      el("thead", {}, el("tr", {}, el("th", {}, "after"), ...[1, 2, 3, 4, 5].map((rank) => el("th", {}, `#${rank}`)))),
      el(
        "tbody",
        {},
        ...found.stages.map((stage) =>
          el(
            "tr",
            { dataset: { stage: stage.stage } },
            el("th", { scope: "row" }, stage.stage),
            ...stage.rows.map((row) =>
              el("td", { dataset: { id: String(row.id), value: String(row.cosine) } }, el("span", { class: "piece" }, row.token), ` ${fixed(row.cosine, 3)}`),
            ),
          ),
        ),
      ),
    ),
  );
}
