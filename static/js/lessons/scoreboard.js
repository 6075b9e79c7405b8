// The faithfulness scoreboard: for every block × head, how far four accounts of what a query draws on (the
// weights, norm-weighted attention, ALTI, gradient × contribution) rank its keys alike, and how far each
// agrees with an intervention: the key's contribution taken out of the head and the model run again. Every
// number is the server's (POST /api/scoreboard); the page only draws and words them.

import * as api from "../api.js";
import { saveRows } from "../export.js";
import { el, fixed } from "../format.js";
import { measureOf } from "../measures.js";
import { fillResult } from "./result.js";

const NAMES = {
  weights: measureOf("weights").name,
  norm: measureOf("norm").name,
  alti: measureOf("alti").name,
  gradient: "gradient × contribution",
  intervention: "intervention",
};
// The same, short, for the choice of what colours the grid: a select cannot wrap, and a projector's panel is
// narrow (the grid's heading says the choice in full).
const SHORT = { weights: "weight", norm: "norm", alti: "ALTI", gradient: "gradient", intervention: "intervention" };
let other = "the bank raised rates"; // an encoder's F: the cosine with this sentence's vector; kept while the page lives
let shown = "agreement:weights"; // what colours the grid: an account's agreement, or a pair's correlation
let averaged = false;

export function renderScoreboard(container, { run, text, token, model, onOpen }) {
  const decoder = Boolean(model.next_tokens);
  const input = el("input", { id: "scoreboard-other", type: "text", value: other, size: "32", "aria-label": "The sentence whose similarity is the output F" });
  input.addEventListener("input", () => {
    other = input.value;
  });
  const over = el(
    "select",
    { id: "scoreboard-query", "aria-label": "Which query's keys are ranked" },
    el("option", { value: "token", ...(averaged ? {} : { selected: "" }) }, token === null ? "the selected token (select one)" : `“${run.tokens[token].label}” (${token})`),
    el("option", { value: "all", ...(averaged ? { selected: "" } : {}) }, "every token, averaged"),
  );
  over.addEventListener("change", () => {
    averaged = over.value === "all";
  });
  const go = el("button", { type: "button", id: "scoreboard-run" }, "Score every head");
  const result = el("div", { class: "lesson-result", id: "scoreboard-result", "aria-live": "polite" });
  go.addEventListener("click", () => {
    const ask = { text, query: averaged ? null : token, ...(decoder ? {} : { other }) };
    if (!averaged && token === null) {
      result.replaceChildren(el("p", { class: "hint" }, "Select a token first, or rank every token's keys averaged."));
      return;
    }
    fillResult(result, "Taking each key out of each head and running the model again…", async () => draw(result, await api.scoreboard(ask), model, onOpen));
  });
  container.replaceChildren(
    el(
      "p",
      { class: "hint" },
      `Four accounts say which keys a query draws on: the ${NAMES.weights}, ${NAMES.norm} (Kobayashi et al. 2020), ${NAMES.alti} (Ferrando et al. 2022, one per block) and ${NAMES.gradient}. For every head the scoreboard ranks the keys each way (Spearman's ρ) and against an intervention: each key's contribution taken out of the head, the model run again, and what its output F loses. F: ${decoder ? "the logit of the token the model would write next" : "the sentence vector's cosine with a second sentence"}.`,
    ),
    el("div", { class: "patch-controls" }, decoder ? null : el("label", {}, "F: similarity to ", input), el("label", {}, "Rank the keys of ", over), go),
    result,
  );
}

// key: "agreement:<account>" or "correlation:<a>:<b>"; the value of one head under it.
function valueOf(head, key) {
  const [kind, ...rest] = key.split(":");
  return kind === "agreement" ? head.agreement[rest[0]] : head.correlations[rest.join(":")];
}

function keyWords(key, names = NAMES) {
  const [kind, a, b] = key.split(":");
  return kind === "agreement" ? `${names[a]} against the ${names.intervention}` : `${names[a]} against ${names[b]}`;
}

function draw(result, board, model, onOpen) {
  const labels = board.tokens.map((token) => token.label);
  const choices = [...board.accounts.map((account) => `agreement:${account}`), ...board.pairs.map((pair) => `correlation:${pair}`)];
  const colour = el("select", { id: "scoreboard-colour", "aria-label": "What each cell shows" }, ...choices.map((key) => el("option", { value: key, title: keyWords(key), ...(key === shown ? { selected: "" } : {}) }, keyWords(key, SHORT))));
  const gridBox = el("div");
  const detail = el("div", { id: "scoreboard-detail" });
  const redraw = () =>
    gridBox.replaceChildren(
      el("h3", { dataset: { field: "shows" } }, `Blocks × heads: Spearman's ρ of the ${keyWords(shown)} (blue: they rank the keys alike; red: in opposite orders)`),
      grid(board, model, shown, (head) => showHead(detail, board, head, labels, onOpen)),
    );
  colour.addEventListener("change", () => {
    shown = colour.value;
    redraw();
  });
  const csv = el("button", { type: "button", id: "scoreboard-csv" }, "Save as CSV");
  csv.addEventListener("click", () => saveCSV(board));
  redraw();
  const where = board.query === null ? "every token's keys, averaged" : `the keys of “${labels[board.query]}” (${board.query})`;
  result.replaceChildren(
    el("p", { class: "caption", dataset: { field: "target" } }, `${targetWords(board)} Ranked: ${where}. Intervention: ${board.intervention}.`),
    el("p", { class: "caption", dataset: { field: "resolution" } }, resolutionWords(board)),
    el("p", { class: "caption", dataset: { field: "summary" } }, summary(board)),
    el("p", { class: "caption", dataset: { field: "unmoved" } }, unmoved(board, labels)),
    el("div", { class: "patch-controls" }, el("label", {}, "Each cell: Spearman's ρ of ", colour), csv),
    gridBox,
    detail,
  );
}

function targetWords(board) {
  const target = board.target;
  return target.kind === "next_token" ? `F: the logit of “${target.token}” after the last token (${fixed(target.value)}).` : `F: the cosine with “${target.other}” (${fixed(target.value)}).`;
}

// Where float32 cannot tell an intervention's effect from rounding, and what was done there instead.
function resolutionWords(board) {
  const { least_float32_effect: least, roundings, float64, removals } = board.resolution;
  return `Float32 resolves F only to about |F|·ε₃₂: an effect under ${roundings} times that (${least.toExponential(1)}) is rounding there, so ${float64} of the ${removals} removals were run again with the model in float64, and ρ ranks their exact effects.`;
}

function mean(values) {
  const kept = values.filter((value) => value !== null);
  return kept.length ? kept.reduce((sum, value) => sum + value, 0) / kept.length : null;
}

// Where the accounts agree with the intervention, over every head.
function summary(board) {
  const means = board.accounts.map((account) => ({ account, rho: mean(board.heads.map((head) => head.agreement[account])) }));
  const best = [...means].sort((x, y) => (y.rho ?? -2) - (x.rho ?? -2))[0];
  return `Agreement with the intervention, mean ρ over the ${board.heads.length} heads: ${means.map(({ account, rho }) => `${NAMES[account]} ${rho === null ? "–" : fixed(rho, 2)}`).join(" · ")}. The ${NAMES[best.account]} agrees best.`;
}

// Where a large weight moves nothing: of every head's largest-weight key, the one whose removal moves F
// least next to that head's other keys.
function unmoved(board, labels) {
  let found = null;
  for (const head of board.heads) {
    const { weights, intervention } = head.values;
    const top = weights.indexOf(Math.max(...weights));
    const below = intervention.filter((value) => value < intervention[top]).length; // keys that move F less
    const gap = weights[top] * (1 - below / Math.max(1, intervention.length - 1));
    if (!found || gap > found.gap) found = { gap, head, top, below };
  }
  const { head, top, below } = found;
  const key = labels[board.keys[top]];
  const moved = head.values.intervention[top];
  const max = Math.max(...head.values.intervention);
  return `A large weight can move nothing: block ${head.layer}, head ${head.head} puts ${fixed(head.values.weights[top], 2)} on “${key}”, its largest weight, yet taking it out changes F by ${fixed(moved, 5)}${below === 0 ? ", the least of its keys" : ""} (its strongest key: ${fixed(max, 5)}).`;
}

// One row per block, one cell per head: ρ, coloured blue for agreement and red for disagreement.
function grid(board, model, key, pick) {
  const node = el("div", { class: "patch-grid", style: `--columns:${model.heads}`, dataset: { grid: "scoreboard", shows: key } }, el("span"));
  for (let head = 0; head < model.heads; head += 1) node.append(el("span", { class: "grid-label", title: `head ${head}` }, `h${head}`));
  for (let layer = 0; layer < model.layers; layer += 1) {
    node.append(el("span", { class: "grid-label" }, `block ${layer}`));
    for (let index = 0; index < model.heads; index += 1) {
      const head = board.heads[layer * model.heads + index];
      const rho = valueOf(head, key);
      const button = el(
        "button",
        {
          type: "button",
          class: `patch-cell${rho !== null && rho < 0 ? " away" : ""}${rho !== null && Math.abs(rho) > 0.55 ? " strong" : ""}`,
          style: `--share:${rho === null ? 0 : Math.abs(rho)}`,
          dataset: { layer: String(layer), head: String(index), ...(rho === null ? {} : { value: String(rho) }) },
          title: `block ${layer}, head ${index}: ρ = ${rho === null ? "undefined (one side is constant)" : fixed(rho, 3)}. Click for its keys.`,
          "aria-label": `Block ${layer}, head ${index}: ρ ${rho === null ? "undefined" : fixed(rho, 2)}`,
        },
        rho === null ? "–" : fixed(rho, 2),
      );
      button.addEventListener("click", () => pick(head));
      node.append(button);
    }
  }
  return node;
}

// A head's keys with every account's number and the intervention's; the head opens in the views above.
function showHead(detail, board, head, labels, onOpen) {
  onOpen(head.layer, head.head);
  const columns = [...board.accounts, "intervention"];
  detail.replaceChildren(
    el("h3", {}, `Block ${head.layer}, head ${head.head}: each key (3 significant digits)`),
    el(
      "table",
      { class: "numbers-table", dataset: { field: "keys" } },
      el("thead", {}, el("tr", {}, el("th", {}, "key"), ...columns.map((name) => el("th", {}, NAMES[name])))),
      el(
        "tbody",
        {},
        ...board.keys.map((key, at) =>
          el(
            "tr",
            {},
            el("th", { scope: "row" }, labels[key]),
            ...columns.map((name) => {
              const exact = name === "intervention" && head.float64.includes(at);
              const about = exact ? { class: "float64", title: `under float32's resolution of F: run again in float64` } : {};
              return el("td", { ...about, dataset: { account: name, value: String(head.values[name][at]) } }, head.values[name][at].toPrecision(3));
            }),
          ),
        ),
      ),
    ),
  );
}

// One row per head: every ρ, as the server sent it.
function saveCSV(board) {
  const header = ["block", "head", ...board.accounts.map((account) => `agreement ${account}`), ...board.pairs.map((pair) => `rho ${pair}`)];
  const rows = board.heads.map((head) => [head.layer, head.head, ...board.accounts.map((account) => head.agreement[account] ?? ""), ...board.pairs.map((pair) => head.correlations[pair] ?? "")]);
  const about = [
    `# scoreboard of run ${board.run_id}; ${board.query === null ? "every query averaged" : `query “${board.tokens[board.query].label}” (${board.query})`}; ${targetWords(board)}`,
    `# agreement: Spearman's rho of an account with the intervention: ${board.intervention}`,
    `# ${resolutionWords(board)}`,
  ];
  saveRows(about, [header, ...rows], `scoreboard-${board.query === null ? "averaged" : `query-${board.query}`}`);
}
