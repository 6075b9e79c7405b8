// Activation patching: A (the text above) run again with one activation taken from B, for every block ×
// position and every block × head, and how far each patch moves A's output towards B's. A cell opens the
// patched run, a run of its own with every view; the cells a patch can reach downstream (its causal cone)
// are shaded.

import * as api from "../api.js";
import { el, fixed } from "../format.js";
import { fillResult } from "./result.js";

const PAIR = { a: "the bank of the river", b: "the bank raised rates" };
const SITES = {
  resid_pre: "the residual stream a block reads",
  attention_output: "a block's attention output",
  ffn_output: "a block's FFN output",
};
let source = PAIR.b; // kept while the page lives
let site = "resid_pre";
let align = "start";

export function renderPatch(container, { run, text, token, model, current, openPatched, useText }) {
  const input = el("input", { id: "patch-source", type: "text", value: source, "aria-label": "Input B, the source of the patches", size: "40" });
  input.addEventListener("input", () => {
    source = input.value;
  });
  const sites = el("select", { id: "patch-site", "aria-label": "What the blocks × positions grid patches" }, ...Object.entries(SITES).map(([name, words]) => el("option", { value: name, ...(name === site ? { selected: "" } : {}) }, words)));
  sites.addEventListener("change", () => {
    site = sites.value;
  });
  const aligns = el(
    "select",
    { id: "patch-align", "aria-label": "How positions pair when A and B have different lengths" },
    el("option", { value: "start", ...(align === "start" ? { selected: "" } : {}) }, "from the start"),
    el("option", { value: "end", ...(align === "end" ? { selected: "" } : {}) }, "from the end (last tokens together)"),
  );
  aligns.addEventListener("change", () => {
    align = aligns.value;
  });
  const go = el("button", { type: "button", id: "patch-run" }, "Patch B into A");
  const pair = el("button", { type: "button", id: "patch-pair" }, `Use the minimal pair: A “${PAIR.a}”, B “${PAIR.b}”`);
  const result = el("div", { class: "lesson-result", id: "patch-result", "aria-live": "polite" });
  go.addEventListener("click", () => sweep(result, { text, token, model, openPatched, predict: current().predict }));
  pair.addEventListener("click", () => {
    source = PAIR.b;
    useText(PAIR.a);
  });
  container.replaceChildren(
    el(
      "p",
      { class: "hint" },
      "A is the text above; B is another input of the same model. Each cell runs A again with one activation replaced by B's at the paired position, and says how far that moves A's output towards B's (blue: towards B, red: away from it). Click a cell to open that patched run.",
    ),
    el("div", { class: "patch-controls" }, el("label", {}, "B ", input), el("label", {}, "Positions grid patches ", sites), el("label", {}, "Pair positions ", aligns), go, pair),
    result,
  );
  if (run.patch) result.append(el("p", { class: "hint" }, "This run is itself patched: run the text again unpatched before patching it."));
}

// predict: "Predict first" is on: the positions grid comes without its numbers, the learner clicks the cell
// they expect to move A furthest towards B, and then every number is shown with where the guess ranks.
async function sweep(result, { text, token, model, openPatched, predict }) {
  const ask = { text, source, align };
  await fillResult(result, "Patching every block × position and block × head…", async () => {
    const positions = await api.patch({ ...ask, site, sweep: "blocks_positions" });
    const paired = new Set(positions.cells.map((cell) => cell.positions[0]));
    const at = token !== null && paired.has(token) ? token : null; // the selected token, or every position
    const heads = await api.patch({ ...ask, site: "head", sweep: "blocks_heads", position: at });
    const decoder = positions.target.kind !== "cosine";
    const open = (cell) => openPatched(text, { source, site: cell.site, layer: cell.layer, head: cell.head, positions: cell.positions, sources: cell.sources });
    const tokens = positions.a_tokens;
    const where = (cell) => (cell.positions.length === 1 ? `at “${tokens[cell.positions[0]].label}” (${cell.positions[0]})` : "at every position");
    const words = (cell) =>
      cell.head === null ? `${SITES[cell.site].replace("a block's", `block ${cell.layer}'s`).replace("a block reads", `block ${cell.layer} reads`)} ${where(cell)}` : `block ${cell.layer}, head ${cell.head} ${where(cell)}`;
    const columns = tokens.map((t, index) => ({ key: index, label: t.label, title: `position ${index}` }));
    const title = el("h3", {}, `Blocks × positions: ${SITES[site]}, one position at a time`);
    const shown = () => [
      el("p", { class: "caption", dataset: { field: "target" } }, targetWords(positions, decoder)),
      title,
      grid(positions, model.layers, columns, (cell) => cell.positions[0], "position", open, decoder),
      el("h3", {}, `Blocks × heads: one head's output ${at === null ? "at every position" : `at “${tokens[at].label}” (${at})`}`),
      grid(heads, model.layers, Array.from({ length: model.heads }, (_, head) => ({ key: head, label: `h${head}`, title: `head ${head}` })), (cell) => cell.head, "head", open, decoder),
      el("h3", {}, "The patches that move A most"),
      el("ol", { class: "patch-strongest", dataset: { field: "strongest" } }, ...strongest([...positions.cells, ...heads.cells], positions, 5).map((cell) => el("li", {}, `${words(cell)}: ${moveWords(cell, positions)}`))),
    ];
    if (!predict) {
      result.replaceChildren(...shown());
      return;
    }
    const guessed = (cell) => {
      const ranked = [...positions.cells].sort((x, y) => share(y, positions) - share(x, positions));
      const best = ranked[0];
      const rank = ranked.indexOf(cell) + 1;
      const verdict = rank === 1 ? "Right: it moves A furthest." : `It ranks ${rank} of ${ranked.length}; the furthest is ${words(best)}: ${moveWords(best, positions)}.`;
      result.replaceChildren(el("p", { class: "caption", dataset: { field: "guess", rank: String(rank) } }, `Your guess: ${words(cell)}: ${moveWords(cell, positions)}. ${verdict}`), ...shown());
    };
    result.replaceChildren(
      el("p", { class: "caption", dataset: { field: "predict" } }, `Predict first: which cell moves A's output furthest towards B's (“${source}”)? Click it; the numbers follow.`),
      title,
      grid(positions, model.layers, columns, (cell) => cell.positions[0], "position", guessed, decoder, true),
    );
  });
}

function moveWords(cell, answer) {
  const moved = share(cell, answer);
  return `${fixed(answer.a.value)} → ${fixed(cell.value)} (${moved >= 0 ? "" : "−"}${fixed(Math.abs(moved) * 100, 0)}% of the way to B)`;
}

function targetWords(answer, decoder) {
  if (!decoder) {
    return `Each cell: the cosine of A's patched sentence vector with B's. A unpatched: ${fixed(answer.a.value)}; B: ${fixed(answer.b.value)}. Colour: how far the patch moves A towards B.`;
  }
  const [first, second] = answer.target.tokens;
  const what = answer.target.kind === "probability" ? `the probability of “${first}”` : `the logit of “${first}” minus that of “${second}”`;
  return `Each cell: ${what} after A's last token. A unpatched: ${fixed(answer.a.value)}; B: ${fixed(answer.b.value)}. Colour: how far the patch moves A towards B.`;
}

// How far a cell moves A's value towards B's: 0 = A's, 1 = B's.
function share(cell, answer) {
  const span = answer.b.value - answer.a.value;
  return span === 0 ? 0 : (cell.value - answer.a.value) / span;
}

function strongest(cells, answer, count) {
  return [...cells].sort((x, y) => Math.abs(share(y, answer)) - Math.abs(share(x, answer))).slice(0, count);
}

// One row per block, one column per position or head; each cell a button with the API's value. A cell in
// focus or under the pointer shades its causal cone: the later blocks, at every position for an encoder
// (its attention reads both ways), at its own and later positions for a decoder.
// hidden: no number, colour or cone shows (a guess is asked on it); a click passes the cell to `open` all the same.
function grid(answer, layers, columns, columnOf, kind, open, decoder, hidden = false) {
  const cells = new Map(answer.cells.map((cell) => [`${cell.layer}:${columnOf(cell)}`, cell]));
  const node = el("div", { class: "patch-grid", style: `--columns:${columns.length}`, dataset: { grid: kind } }, el("span"));
  for (const column of columns) node.append(el("span", { class: "grid-label", title: column.title }, column.label));
  const buttons = [];
  for (let layer = 0; layer < layers; layer += 1) {
    node.append(el("span", { class: "grid-label" }, `block ${layer}`));
    for (const column of columns) {
      const cell = cells.get(`${layer}:${column.key}`);
      if (!cell) {
        node.append(el("span", { class: "patch-cell empty", title: "no partner in B" }));
        continue;
      }
      if (hidden) {
        const guess = el("button", { type: "button", class: "patch-cell", dataset: { layer: String(layer), [kind]: String(column.key) }, "aria-label": `Guess block ${layer}, ${column.title} (${column.label})` });
        guess.addEventListener("click", () => open(cell));
        node.append(guess);
        continue;
      }
      const moved = share(cell, answer);
      const button = el(
        "button",
        {
          type: "button",
          class: `patch-cell${moved < 0 ? " away" : ""}${Math.abs(moved) > 0.55 ? " strong" : ""}`,
          style: `--share:${Math.min(1, Math.abs(moved))}`,
          dataset: { layer: String(layer), [kind]: String(column.key), value: String(cell.value) },
          title: `block ${layer}, ${column.title}: ${fixed(cell.value, 4)} (${fixed(moved * 100, 0)}% of the way to B). Click to open this patched run.`,
          "aria-label": `Block ${layer}, ${column.title} (${column.label}): ${fixed(cell.value, 3)}`,
        },
        fixed(cell.value, 2),
      );
      button.addEventListener("click", () => open(cell));
      for (const event of ["mouseenter", "focus"]) button.addEventListener(event, () => cone(buttons, layer, column.key, kind, decoder));
      buttons.push(button);
      node.append(button);
    }
  }
  // At rest, the strongest cell's cone is shaded.
  const [first] = hidden ? [] : strongest(answer.cells, answer, 1);
  const rest = () => first && cone(buttons, first.layer, columnOf(first), kind, decoder);
  node.addEventListener("mouseleave", rest);
  rest();
  return node;
}

function cone(buttons, layer, column, kind, decoder) {
  for (const button of buttons) {
    const later = Number(button.dataset.layer) > layer;
    const reached = kind === "head" || !decoder || Number(button.dataset[kind]) >= column;
    const self = Number(button.dataset.layer) === layer && Number(button.dataset[kind]) === column;
    button.classList.toggle("cone", (later && reached) || self);
    button.classList.toggle("origin", self);
  }
}
