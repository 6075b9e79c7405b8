// The worked example: for query token i in head h of block l, every step from Q and K to the context
// vector, with the model's own numbers, and where the head's 32 numbers go in the 384 of the block.

import { blankNote } from "./blind.js";
import { missing, unavailableNote } from "./capabilities.js";
import { argmax, count, el, fixed, numberList, vectorStrip } from "./format.js";
import { scaledByRootD } from "./matrix.js";
import { cellSymbol, measureOf } from "./measures.js";
import { byId } from "./root.js";

const SHOWN_KEYS = 12;
const WEIGHT = measureOf("weights"); // the worked example computes one head's softmax, whatever the views' measure

function step(title, shape, ...body) {
  return el("div", { class: "step" }, el("h3", {}, title, shape ? el("span", { class: "shape" }, shape) : null), ...body);
}

// numbers: this query's row of the head (api.query): q, every k and v, scores, weights, context.
export function renderDissection(container, { tokens, selected, layer, head, numbers, trace, model }) {
  if (selected === null) {
    container.replaceChildren(el("p", { class: "hint" }, "Select a token to work through its attention."));
    return;
  }
  if (head === "mean") {
    container.replaceChildren(el("p", { class: "hint" }, "Pick one head (not the average) to see its arithmetic."));
    return;
  }
  const d = model.head_dim;
  // The factor on q·k: 1/√d in most models, the block's own where it differs (a GPT-2 may divide by the
  // block's number too, or not scale at all).
  const scale = model.scales[layer];
  const byRootD = scaledByRootD(model, [layer]);
  const n = tokens.length;
  const i = selected;
  const query = tokens[i];
  const { q, scores, weights, context } = numbers;
  const j = argmax(weights);
  const k = numbers.k[j];
  const dot = q.reduce((sum, value, dim) => sum + value * k[dim], 0);
  const visible = weights
    .map((weight, index) => ({ index, weight, score: scores[index] }))
    .filter(({ score }) => score > -1e30); // the causal mask's hidden keys take no part in the softmax
  const largest = Math.max(...visible.map(({ score }) => score));
  const exps = visible.map(({ score }) => Math.exp(score - largest));
  const total = exps.reduce((sum, value) => sum + value, 0);
  const rows = visible
    .map((entry, position) => ({ ...entry, exp: exps[position] }))
    .sort((a, b) => b.weight - a.weight)
    .slice(0, SHOWN_KEYS);
  const slice = [head * d, head * d + d - 1];
  const steps = [
    el(
      "p",
      { class: "caption" },
      `Block ${layer}, head ${head}, query token ${i} “`,
      el("strong", {}, query.label),
      `”. The head reads columns ${slice[0]}–${slice[1]} of Q, K and V.`,
    ),
    step(`q${sub(i)}: the query vector of “${query.label}”`, `1×${d}`, vectorStrip(q, { cellWidth: 8, label: "query vector" }), numberList(q, "q")),
    step(
      `Most attended key: “${tokens[j].label}” (token ${j}), k${sub(j)}`,
      `1×${d}`,
      el("p", { dataset: { field: "top-key", index: String(j) } }, `${cellSymbol(WEIGHT, i, j)} = ${fixed(weights[j])}, the largest ${WEIGHT.name} in row ${i}.`),
      vectorStrip(k, { cellWidth: 8, label: "key vector" }),
      numberList(k, "k"),
    ),
    step(
      byRootD ? "Dot product, then scale by √d" : "Dot product, then this block's scale",
      "scalar",
      el(
        "p",
        { class: "math" },
        `q·k = ${q.slice(0, 2).map((value, dim) => `(${fixed(value, 3)})(${fixed(k[dim], 3)})`).join(" + ")} + … = `,
        el("strong", { dataset: { field: "dot", value: String(dot) } }, fixed(dot)),
      ),
      el(
        "p",
        { class: "math" },
        byRootD ? `score = q·k ÷ √${d} = ${fixed(dot)} ÷ ${fixed(Math.sqrt(d), 3)} = ` : `score = q·k × ${fixed(scale, 5)} = ${fixed(dot)} × ${fixed(scale, 5)} = `,
        el("strong", { dataset: { field: "score", value: String(scores[j]) } }, fixed(scores[j])),
        " (the model's own value)",
      ),
      // What this model's scores do besides q·k/√d (GET /api/model's score_notes).
      model.score_notes.length ? el("ul", { class: "score-notes", dataset: { field: "score-notes" } }, ...model.score_notes.map((note) => el("li", {}, note))) : null,
    ),
    step(
      `Softmax over row ${i}: weight = exp(score − max) ÷ Σ exp`,
      `1×${n}`,
      el("p", { class: "math" }, `max score = ${fixed(largest)}, Σ exp(score − max) = ${fixed(total)} over ${visible.length} keys`),
      softmaxTable(rows, tokens, j, total),
      visible.length > SHOWN_KEYS ? el("p", { class: "hint" }, `… and ${visible.length - SHOWN_KEYS} smaller weights.`) : null,
    ),
    step(
      `Weighted sum of values: context${sub(i)} = Σⱼ A[${i},j] · v_j`,
      `1×${d}`,
      vectorStrip(context, { cellWidth: 8, label: "context vector" }),
      numberList(context, "context"),
    ),
    step(
      `Concatenate the ${count(model.heads, "head")} and multiply by W_O`,
      `1×${model.heads * d} · ${model.heads * d}×${model.hidden_size}`,
      concatBar(model.heads, head),
      numbers.ablated
        ? el(
            "p",
            { class: "ablated-note", dataset: { field: "ablated" } },
            `This head is switched off in this run: the context above is what it computes, but W_O receives zeros in columns ${slice[0]}–${slice[1]} instead (`,
            el("strong", { dataset: { field: "context-to-output", value: String(Math.max(...numbers.context_to_output.map(Math.abs))) } }, `largest |value| ${fixed(Math.max(...numbers.context_to_output.map(Math.abs)))}`),
            ").",
          )
        : null,
      el("p", { class: "hint" }, `This head fills columns ${slice[0]}–${slice[1]} of the ${model.heads * d}-wide concatenation; W_O mixes all of them into the block's attention output:`),
      trace ? vectorStrip(trace.layers[layer].attention_output, { label: "attention output after W_O" }) : el("p", { class: "hint" }, "Loading…"),
    ),
  ];
  container.replaceChildren(...steps);
}

function sub(index) {
  return String(index).replace(/\d/g, (digit) => "₀₁₂₃₄₅₆₇₈₉"[digit]);
}

function softmaxTable(rows, tokens, top, total) {
  return el(
    "table",
    { class: "softmax", dataset: { field: "softmax" } },
    el("thead", {}, el("tr", {}, el("th", {}, "key"), el("th", {}, "score"), el("th", {}, "exp(score − max)"), el("th", {}, "weight"))),
    el(
      "tbody",
      {},
      ...rows.map(({ index, score, exp, weight }) =>
        el(
          "tr",
          { class: index === top ? "top" : "", dataset: { index: String(index), weight: String(weight) } },
          el("td", {}, `${tokens[index].label} (${index})`),
          el("td", {}, fixed(score)),
          el("td", {}, fixed(exp)),
          el("td", {}, fixed(weight), el("span", { class: "hint" }, ` = ${fixed(exp)} ÷ ${fixed(total)}`)),
        ),
      ),
    ),
  );
}

function concatBar(heads, current) {
  return el(
    "div",
    { class: "concat", role: "img", "aria-label": `head ${current} of ${heads} in the concatenation` },
    ...Array.from({ length: heads }, (_, head) => el("span", { class: head === current ? "current" : "" }, head)),
  );
}

export const dissectionView = {
  id: "dissection",
  follows: ["run", "layer", "head", "token"],
  shown: (state) => state.panel === "dissection",
  blank: blankNote("dissection"),
  async load({ layer, head, token }, lab) {
    if (token === null || head === "mean" || missing(lab.model, "worked_example")) return null;
    const [numbers, trace] = await Promise.all([lab.numbers().query(layer, head, token), lab.numbers().trace(token)]);
    return { numbers, trace };
  },
  render({ run, layer, head, token }, data, lab) {
    if (missing(lab.model, "worked_example")) {
      byId("dissection").replaceChildren(unavailableNote(lab.model, "worked_example"));
      return;
    }
    renderDissection(byId("dissection"), { tokens: run.tokens, selected: token, layer, head, model: lab.model, ...data });
  },
};
