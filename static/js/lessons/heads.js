// What each head does, measured: row entropy and where the attention goes, a label only where a share
// passes the threshold; and attention rollout for the selected token.

import * as api from "../api.js";
import { ATLAS_KEY } from "../atlas-key.js";
import { el, fixed } from "../format.js";

const ROLES = [
  ["self", "itself"],
  ["previous", "previous token"],
  ["next", "next token"],
];

// Where a prompt's label and the corpus's (the head atlas, /atlas) name the same pattern.
const CORPUS_SCORE = { cls: "sink", self: "self", previous: "previous" };

// The last atlas the atlas page showed in this browser, for this model, if this lab keeps it computed:
// asking for one it does not keep would start a corpus run. null otherwise.
async function keptAtlas(model) {
  let stored = null;
  try {
    stored = JSON.parse(localStorage.getItem(ATLAS_KEY));
  } catch {
    return null;
  }
  if (stored?.model !== model.name) return null;
  return api.keptJob(api.atlasUrl(stored.id));
}

// The corpus's label where it differs from this prompt's: null where they agree.
function corpusDisagrees(atlas, stat, strongest) {
  if (atlas === null) return null;
  const corpus = atlas.labels[stat.layer][stat.head];
  const mine = stat.label ? (CORPUS_SCORE[strongest.key] ?? strongest.key) : null;
  if ((corpus?.score ?? null) === mine) return null;
  return corpus ? `corpus: ${corpus.score} ${fixed(corpus.value, 2)}` : "corpus: none";
}

export async function renderHeads(container, { run, token, model, onOpen }) {
  container.replaceChildren(el("p", { class: "hint" }, "Measuring every head…"));
  const [stats, flow, atlas] = await Promise.all([
    api.headStats(run.run_id),
    token === null ? null : api.rollout(run.run_id, token),
    keptAtlas(model),
  ]);
  // The tokens the tokenizer added, as this run writes them ([CLS] and [SEP] for BERT).
  const shares = [["cls", stats.added.cls || "first added token"], ["sep", stats.added.sep || "closing added tokens"], ...ROLES];
  const cells = stats.heads.map((stat) => {
    const [strongest] = shares.map(([key, name]) => ({ key, name, value: stat[key] })).sort((x, y) => y.value - x.value);
    const disagrees = corpusDisagrees(atlas, stat, strongest);
    return el(
      "button",
      {
        type: "button",
        class: `head-role${stat.label ? " labelled" : ""}`,
        dataset: { layer: String(stat.layer), head: String(stat.head), label: stat.label ?? "", corpus: disagrees ?? "" },
        title: [`entropy ${fixed(stat.entropy, 3)} nats`, ...shares.map(([key, name]) => `${name} ${fixed(stat[key], 3)}`)].join(" · "),
        "aria-label": `Block ${stat.layer}, head ${stat.head}: ${stat.label ?? "no single role"}`,
      },
      el("span", { class: "role" }, stat.label ?? "—"),
      el("span", { class: "share" }, `${strongest.name} ${fixed(strongest.value, 2)}`),
      el("span", { class: "entropy" }, `H ${fixed(stat.entropy, 2)}`),
      ...(disagrees ? [el("span", { class: "corpus" }, disagrees)] : []),
    );
  });
  const labelled = [el("span"), ...Array.from({ length: model.heads }, (_, head) => el("span", { class: "grid-label" }, `head ${head}`))];
  cells.forEach((cell, index) => {
    if (index % model.heads === 0) labelled.push(el("span", { class: "grid-label" }, `block ${index / model.heads}`));
    labelled.push(cell);
  });
  const grid = el("div", { class: "head-roles", style: `--heads:${model.heads}` }, ...labelled);
  grid.addEventListener("click", (event) => {
    const cell = event.target.closest(".head-role");
    if (cell) onOpen(Number(cell.dataset.layer), Number(cell.dataset.head));
  });
  container.replaceChildren(
    el(
      "p",
      { class: "hint" },
      `Each square: the head's role, named only when a share passes ${stats.threshold} (mean share of a query's attention on ${shares[0][1]}, ${shares[1][1]} or itself, over all ${run.tokens.length} queries; on the previous token over the ${run.tokens.length - 1} queries that have one (all but the first); on the next token over the ${run.tokens.length - 1} that have one (all but the last)), the largest share, and the mean row entropy H in nats (low: focused; high: spread). Click a square to open that head.`,
    ),
    atlas
      ? el(
          "p",
          { class: "hint" },
          `“corpus:” marks a head whose label over the ${atlas.sentences} sentences of the last `,
          el("a", { href: `/atlas?id=${atlas.atlas_id}` }, "head atlas"),
          " differs from this prompt's: the pattern it shows there (previous token, first-token sink, self, induction) and its score, or none.",
        )
      : el("p", { class: "hint" }, "One prompt can mislabel a head: a ", el("a", { href: "/atlas" }, "head atlas"), " measures every head over many sentences."),
    grid,
    flow === null ? el("p", { class: "hint" }, "Select a token to see its attention rollout.") : rolloutBars(flow, run.tokens),
  );
}

function rolloutBars(flow, tokens) {
  const largest = Math.max(...flow.rollout);
  return el(
    "div",
    { class: "rollout", dataset: { field: "rollout" } },
    el(
      "h3",
      {},
      `Attention rollout into “${tokens[flow.index].label}” (token ${flow.index}): the heads averaged, 0.5·A + 0.5·I for the residual path, multiplied through the ${"blocks"} (Abnar & Zuidema 2020)`,
    ),
    el(
      "ol",
      { class: "rollout-rows", start: "0" },
      ...flow.rollout.map((share, index) =>
        el(
          "li",
          { dataset: { index: String(index), value: String(share) } },
          el("span", { class: "attend-token" }, tokens[index].label),
          el("span", { class: "bar", style: `width:${(100 * share) / largest}%` }),
          el("span", { class: "attend-weight" }, fixed(share)),
        ),
      ),
    ),
  );
}
