// "Is attention explanation?": for the selected token, the keys ranked four ways (by raw weight, by
// norm-weighted attention, by ALTI rolled out to this block, and by Integrated Gradients of the sentence's
// similarity to a second one, or of the next-token logit for a model with an LM head), how far the
// rankings agree (Spearman's ρ), and where they disagree most.

import * as api from "../api.js";
import { numbersOf } from "../data.js";
import { el, fixed } from "../format.js";
import { measureOf } from "../measures.js";
import { fillResult } from "./result.js";

// The four rankings: three measures as declared (measures.js), and gradient attribution, which is not one.
const RANKINGS = [
  ...["weights", "norm", "alti_rollout"].map((key) => [key, measureOf(key).name]),
  ["attribution", "Integrated Gradients"],
];
const WEIGHT = measureOf("weights").name;

export function renderExplain(container, { run, text, token, current, model }) {
  const { layer, head } = current();
  if (token === null || head === "mean") {
    container.replaceChildren(el("p", { class: "hint" }, "Select a token, and one head (not a mean), to rank what it attends to four ways."));
    return;
  }
  // A model with an LM head explains its own next token; an encoder its similarity to a second sentence.
  const nextToken = model.next_tokens;
  const other = el("input", { type: "text", id: "explain-other", value: run.text_pair || "The weather is nice today.", "aria-label": "Second sentence" });
  const result = el("div", { class: "lesson-result", id: "explain-result", "aria-live": "polite" });
  const form = el(
    "form",
    { class: "lesson-form" },
    nextToken ? el("span", {}, "Attribution of the most likely next token's logit") : el("label", {}, "Similarity to ", other),
    el("button", { type: "submit" }, "Rank"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const target = nextToken ? { target: "next_token" } : { other: other.value };
    await fillResult(result, "Measuring four ways (Integrated Gradients takes a few seconds)…", async () =>
      show(result, run, token, layer, head, await rows(run, text, token, layer, head, target)),
    );
  });
  container.replaceChildren(
    el(
      "p",
      { class: "hint" },
      `A large weight need not move much: “${run.tokens[token].label}” in block ${layer}, head ${head}, its keys ranked by ${WEIGHT} ${measureOf("weights").symbol}, by ${measureOf("norm").name} ${measureOf("norm").symbol} (Kobayashi et al. 2020), by ${measureOf("alti_rollout").name} ${measureOf("alti_rollout").symbol} to this block (Ferrando et al. 2022), and by Integrated Gradients ${nextToken ? "of the logit of the token the model would write next" : "of the sentence's similarity to a second sentence"} (one ranking for the whole text).`,
    ),
    form,
    result,
  );
  form.requestSubmit();
}

async function rows(run, text, token, layer, head, target) {
  const n = run.tokens.length;
  const numbers = numbersOf(run.run_id);
  const rowOf = (values, headIndex) => Array.from(values.subarray((headIndex * n + token) * n, (headIndex * n + token + 1) * n));
  const [weights, norms, alti, attribution] = await Promise.all([
    numbers.block(layer, "weights"),
    numbers.block(layer, "norm"),
    numbers.block(layer, "alti_rollout"),
    api.attribution({ text, ...target }),
  ]);
  // Attribution reads what the model's pooling reads (its first max_seq_length tokens): keys past it get 0.
  const attributed = Array.from({ length: n }, (_, key) => Math.abs(attribution.attributions[key] ?? 0));
  return { weights: rowOf(weights, head), norm: rowOf(norms, head), alti_rollout: rowOf(alti, 0), attribution: attributed, delta: attribution.delta };
}

// Rank 1 for the largest value; ties share their mean rank.
export function ranks(values) {
  const order = values.map((value, index) => ({ value, index })).sort((a, b) => b.value - a.value);
  const rank = new Array(values.length);
  for (let start = 0; start < order.length; ) {
    let end = start;
    while (end + 1 < order.length && order[end + 1].value === order[start].value) end += 1;
    for (let at = start; at <= end; at += 1) rank[order[at].index] = (start + end) / 2 + 1;
    start = end + 1;
  }
  return rank;
}

// Spearman's ρ: Pearson's correlation of the ranks.
export function spearman(a, b) {
  const [x, y] = [ranks(a), ranks(b)];
  const mean = (values) => values.reduce((sum, value) => sum + value, 0) / values.length;
  const [mx, my] = [mean(x), mean(y)];
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < x.length; i += 1) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) ** 2;
    syy += (y[i] - my) ** 2;
  }
  return sxx && syy ? sxy / Math.sqrt(sxx * syy) : 1;
}

function show(result, run, token, layer, head, measured) {
  const rankings = Object.fromEntries(RANKINGS.map(([key]) => [key, ranks(measured[key])]));
  const top = ranks(measured.weights).map((rank, key) => ({ rank, key })).sort((a, b) => a.rank - b.rank).slice(0, 8);
  const correlations = RANKINGS.slice(1).map(([key, name]) => ({ key, name, rho: spearman(measured.weights, measured[key]) }));
  // Where the raw weight and another measure disagree most: the key whose ranks differ most.
  let worst = { gap: -1 };
  for (const { key: measure, name } of correlations) {
    for (let key = 0; key < run.tokens.length; key += 1) {
      const gap = Math.abs(rankings.weights[key] - rankings[measure][key]);
      if (gap > worst.gap) worst = { gap, key, measure, name };
    }
  }
  const labels = run.tokens.map((token) => token.label);
  const word = (key) => `“${labels[key]}”`;
  const ordinal = (rank) => `${Math.round(rank)}${["th", "st", "nd", "rd"][Math.round(rank) % 10 > 3 || [11, 12, 13].includes(Math.round(rank) % 100) ? 0 : Math.round(rank) % 10]}`;
  result.replaceChildren(
    el(
      "table",
      { class: "numbers-table", dataset: { field: "rankings" } },
      el("thead", {}, el("tr", {}, el("th", {}, "key"), ...RANKINGS.map(([, name]) => el("th", {}, name)))),
      el(
        "tbody",
        {},
        ...top.map(({ key }) =>
          el(
            "tr",
            { dataset: { key: String(key) } },
            el("th", { scope: "row" }, labels[key]),
            ...RANKINGS.map(([measure]) => el("td", { dataset: { measure, value: String(measured[measure][key]) } }, `${fixed(measured[measure][key], 3)} (#${Math.round(rankings[measure][key])})`)),
          ),
        ),
      ),
    ),
    el(
      "p",
      { class: "caption", dataset: { field: "correlations" } },
      `Rank correlation with the ${WEIGHT} (Spearman's ρ, over all keys): `,
      ...correlations.flatMap(({ key, name, rho }, at) => [at ? " · " : "", `${name} `, el("strong", { dataset: { measure: key, rho: String(rho) } }, fixed(rho, 2))]),
      ".",
    ),
    el(
      "p",
      { class: "caption", dataset: { field: "disagreement" } },
      worst.gap > 0
        ? `They disagree most on ${word(worst.key)}: the ${WEIGHT} ranks it ${ordinal(rankings.weights[worst.key])}, ${worst.name} ${ordinal(rankings[worst.measure][worst.key])}. ${rankings.weights[worst.key] < rankings[worst.measure][worst.key] ? "It gets attention but moves little through it." : "It moves more than its weight suggests."}`
        : "All four rank the keys alike here.",
    ),
    measured.delta === null ? null : el("p", { class: "hint" }, `Integrated Gradients' convergence delta: ${fixed(measured.delta, 4)}.`),
  );
}
