// The sentence vector at work: a corpus indexed once (each document read alone into its vector), a query read in
// one pass, its nearest documents by cosine over every document (exact) and from an HNSW graph (approximate),
// the prefixes a query and a document are read with, and the top k re-read as (query, document) pairs, the
// cross-encoder's way: one pass per pair.

import * as api from "../api.js";
import { el, fixed } from "../format.js";
import { fillResult } from "./result.js";

// What the panel had indexed and asked, kept while the page lives: a new run redraws the lesson, not its index.
const kept = { indexes: {}, corpus: "", query: null, k: 10, m: 16, efConstruction: 128, ef: 64, compare: false, queryPrefix: "query: ", documentPrefix: "passage: " };
const MAX_PAIRS = 20;
const count = (n) => Number(n).toLocaleString("en");
const ms = (value) => `${value < 10 ? fixed(value, 1) : Math.round(value).toLocaleString("en")} ms`;

function number(id, label, value, min, max, title) {
  return el("label", { title }, `${label} `, el("input", { type: "number", id, value: String(value), min: String(min), max: String(max), inputmode: "numeric" }));
}

export function renderSearch(container, context) {
  const { model } = context;
  const prompts = Object.keys(model.prompts);
  const corpus = el("textarea", { id: "search-corpus", rows: "3", placeholder: "Leave empty for the lab's corpus (3,080 sentences on 14 topics), or paste documents, one a line", "aria-label": "Documents, one a line" });
  corpus.value = kept.corpus;
  const file = el("input", { type: "file", id: "search-file", accept: ".txt,text/plain", "aria-label": "Or a text file, one document a line" });
  file.addEventListener("change", async () => {
    if (file.files[0]) corpus.value = await file.files[0].text();
  });
  const indexing = el("p", { class: "hint", id: "search-status", role: "status" }, "");
  const bar = el("progress", { id: "search-progress", max: "1", value: "0", hidden: "" });
  const cancel = el("button", { type: "button", id: "search-cancel", disabled: "" }, "Cancel");
  const indexForm = el(
    "form",
    { class: "lesson-form search-corpus" },
    corpus,
    el("label", {}, "or a file ", file),
    el("button", { type: "submit", id: "search-index" }, "Index"),
    cancel,
    bar,
  );
  const query = el("input", { type: "search", id: "search-query", value: kept.query ?? context.text, "aria-label": "Query" });
  const compare = el("input", { type: "checkbox", id: "search-compare", ...(kept.compare ? { checked: "" } : {}) });
  const queryPrefix = el("input", { type: "text", id: "search-query-prefix", value: kept.queryPrefix, "aria-label": "Query prefix" });
  const documentPrefix = el("input", { type: "text", id: "search-document-prefix", value: kept.documentPrefix, "aria-label": "Document prefix" });
  // A model with prompts (config_sentence_transformers.json) reads queries and documents with its own: the
  // comparison is without them. Another is compared with and without a typed prefix.
  const prefixes = prompts.length
    ? el("label", {}, compare, ` also without ${model.name}'s prompts (it reads queries with “${model.prompts.query ?? ""}”, documents with their own)`)
    : el("span", { class: "search-prefixes" }, el("label", {}, compare, " also with typed prefixes: "), queryPrefix, documentPrefix);
  const queryForm = el(
    "form",
    { class: "lesson-form" },
    el("label", { class: "search-query" }, "Query", query),
    number("search-k", "k", kept.k, 1, 100, "How many documents"),
    el("button", { type: "submit", id: "search-ask", disabled: "" }, "Search"),
    prefixes,
  );
  const knobs = el(
    "fieldset",
    { class: "lesson-form search-knobs" },
    el("legend", {}, "HNSW (usearch)"),
    number("search-m", "M", kept.m, 2, 64, "Links per vector in each layer of the graph: a rebuild"),
    number("search-ef-construction", "ef_construction", kept.efConstruction, 2, 1024, "Depth of the search that links each vector as it is added: a rebuild"),
    number("search-ef", "ef", kept.ef, 1, 1024, "Depth of a query's search (at least k)"),
  );
  const result = el("div", { class: "lesson-result", id: "search-result", "aria-live": "polite" });
  container.replaceChildren(
    el(
      "p",
      { class: "hint" },
      `A bi-encoder reads every document once, alone, into its sentence vector (${model.name}: pooled, normalised, ${model.hidden_size} numbers), and a query into its own: one pass per query, then the cosine with every vector. An HNSW graph finds nearly the same neighbours without reading every vector.`,
    ),
    indexForm,
    indexing,
    queryForm,
    knobs,
    result,
  );

  const read = () => {
    Object.assign(kept, {
      corpus: corpus.value,
      query: query.value,
      k: Number(document.getElementById("search-k").value),
      m: Number(document.getElementById("search-m").value),
      efConstruction: Number(document.getElementById("search-ef-construction").value),
      ef: Number(document.getElementById("search-ef").value),
      compare: compare.checked,
      queryPrefix: queryPrefix.value,
      documentPrefix: documentPrefix.value,
    });
  };
  const documents = () => (corpus.value.trim() ? corpus.value : null);
  const key = (variant) => JSON.stringify([model.name, documents(), variant]);
  let running = null;

  // An index: started (its id names its corpus), then asked for while its progress is polled; Cancel (or a
  // new run leaving the lesson) aborts the request, and the lab stops its passes at the next one.
  async function index(variant) {
    const known = kept.indexes[key(variant)];
    if (known) return known;
    const started = await api.startIndex({ documents: documents(), ...variant });
    running = new AbortController();
    cancel.disabled = false;
    bar.hidden = false;
    bar.value = 0;
    indexing.textContent = `Indexing ${count(started.documents)} documents…`;
    const signal = running.signal;
    try {
      const found = await api.longJob(api.indexUrl(started.index_id), {
        signal,
        onProgress: (done, total) => {
          bar.value = done / total;
          indexing.textContent = `Indexing ${count(started.documents)} documents: padded pass ${done} of ${total}`;
        },
      });
      kept.indexes[key(variant)] = found;
      indexing.textContent = told();
      return found;
    } catch (error) {
      const said = signal.aborted ? new Error("Cancelled: the lab stops indexing at its next pass.") : error;
      indexing.textContent = said.message;
      throw said;
    } finally {
      bar.hidden = true;
      cancel.disabled = true;
      running = null;
    }
  }
  cancel.addEventListener("click", () => running?.abort());

  const describe = (found) =>
    `Index ${found.index_id.slice(0, 8)}…: ${count(found.documents)} documents, ${count(found.tokens)} tokens${found.cut ? ` (${found.cut} cut at ${found.max_tokens})` : ""}, vectors of ${found.size}, made in ${count(found.passes)} padded passes (${fixed(found.seconds, 1)} s)${found.prompt ? `, each read after the “${found.prompt}” prompt` : ""}${found.prefix ? `, each after “${found.prefix}”` : ""}.`;
  const plain = prompts.length ? {} : { prefix: "" };
  // The corpus read the other way, for the comparison: without the model's prompts, or after the typed prefix.
  const other = () => (prompts.length ? { prompt: "" } : { prefix: kept.documentPrefix });
  // What the status line says once no index is on its way: each index of this corpus the panel holds.
  const told = () => [plain, other()].map((variant) => kept.indexes[key(variant)]).filter(Boolean).map(describe).join(" ");
  indexForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    read();
    try {
      await index(plain);
      document.getElementById("search-ask").disabled = false;
    } catch {
      // the status line says why
    }
  });
  queryForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    read();
    await fillResult(result, "Reading the query…", async () => {
      const base = await index(plain);
      const asked = { query: query.value, k: Math.min(kept.k, base.documents), hnsw: { m: kept.m, ef_construction: kept.efConstruction, ef: kept.ef } };
      const found = { ...(await api.search({ ...asked, index_id: base.index_id, ...(prompts.length ? {} : { prefix: "" }) })), asked: query.value };
      showResults(result, found, base, context);
      // The results at the top of the panel, which scrolls (never the page): the forms above them stay a scroll away.
      const scroller = result.closest(".panel-body");
      if (scroller) scroller.scrollTop += result.getBoundingClientRect().top - scroller.getBoundingClientRect().top;
      if (!kept.compare) return;
      // The same query and corpus read the other way: without the model's prompts, or with typed prefixes.
      const otherIndex = await index(other());
      const moved = await api.search({ ...asked, index_id: otherIndex.index_id, ...(prompts.length ? { prompt: "" } : { prefix: kept.queryPrefix }) });
      result.querySelector("#search-pairs").before(moves(found, moved, prompts.length ? "without its prompts" : `with “${kept.queryPrefix}” and “${kept.documentPrefix}”`));
    });
  });
  if (!prompts.length) queryForm.querySelectorAll(".search-prefixes input[type=text]").forEach((input) => input.addEventListener("input", read));
  if (kept.indexes[key(plain)]) {
    indexing.textContent = told();
    document.getElementById("search-ask").disabled = false;
  }
}

// The link that opens a (query, document) pair in the lab: the query as A, the document as B, A → B shown.
function pairLink(queryText, documentText, context) {
  const params = new URLSearchParams({ text: queryText, pair: documentText, segments: "AB" });
  const link = el("a", { href: `?${params}`, class: "search-open", dataset: { field: "open-pair" } }, "open as a pair");
  link.addEventListener("click", (event) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return; // a new tab follows the link
    event.preventDefault();
    context.openPair(queryText, documentText);
  });
  return link;
}

function showResults(result, found, base, context) {
  const approximate = found.approximate;
  const graphRank = new Map(approximate.hits.map((hit) => [hit.document, hit.rank]));
  const missed = approximate.hits.filter((hit) => !found.exact.some((exact) => exact.document === hit.document));
  // The results first (the panel scrolls to them), each document with its link after its text: in a projector's
  // side column a row is the document's two lines, not a column of its own for the link.
  result.replaceChildren(
    el(
      "table",
      { class: "numbers-table search-hits", dataset: { field: "exact" } },
      el("caption", {}, `The top ${found.k} by cosine (exact), and where the HNSW graph put each`),
      el("thead", {}, el("tr", {}, el("th", {}, "#"), el("th", {}, "document"), el("th", {}, "cosine"), el("th", {}, "HNSW"))),
      el(
        "tbody",
        {},
        ...found.exact.map((hit) =>
          el(
            "tr",
            { dataset: { document: String(hit.document), score: String(hit.score) } },
            el("td", {}, String(hit.rank)),
            el("td", { class: "search-text" }, `${hit.text} `, pairLink(found.asked, hit.text, context)),
            el("td", {}, fixed(hit.score, 3)),
            el("td", { dataset: { field: "graph-rank" } }, graphRank.has(hit.document) ? `#${graphRank.get(hit.document)}` : "missed"),
          ),
        ),
      ),
    ),
    el(
      "p",
      { class: "caption", dataset: { field: "query", tokens: String(found.query.tokens) } },
      `“${found.query.text}”: ${found.query.tokens} tokens, one pass (${ms(found.query.ms)}), then the cosine with each of ${count(base.documents)} vectors and a sort (${ms(found.exact_ms)}).`,
    ),
    ...(missed.length ? [el("p", { class: "caption" }, `The graph returned instead: ${missed.map((hit) => `“${hit.text}” (${fixed(hit.score, 3)})`).join("; ")}.`)] : []),
    el(
      "p",
      { class: "caption", dataset: { field: "recall", value: String(approximate.recall) } },
      "HNSW: recall@",
      String(found.k),
      " ",
      el("strong", {}, fixed(approximate.recall, 2)),
      ` in ${ms(approximate.ms)} against ${ms(found.exact_ms)} for every cosine (M ${approximate.m}, ef_construction ${approximate.ef_construction}, ef ${approximate.ef}; the graph built once in ${fixed(approximate.build_seconds, 2)} s). At a few thousand documents reading every vector is cheap; the graph's search grows with the log of the corpus, the exact one with the corpus.`,
    ),
    pairsPart(found, base, context),
  );
}

// How the ranking and the scores move when the query and the documents are read the other way.
function moves(found, moved, how) {
  const before = new Map(found.exact.map((hit) => [hit.document, hit]));
  return el(
    "table",
    { class: "numbers-table search-moves", dataset: { field: "moves" } },
    el("caption", {}, `Read ${how}: “${moved.query.text}”`),
    el("thead", {}, el("tr", {}, el("th", {}, "#"), el("th", {}, "document"), el("th", {}, "cosine"), el("th", {}, "before"))),
    el(
      "tbody",
      {},
      ...moved.exact.map((hit) => {
        const was = before.get(hit.document);
        const change = was ? (was.rank === hit.rank ? "=" : `#${was.rank} (${was.rank > hit.rank ? "↑" : "↓"}${Math.abs(was.rank - hit.rank)})`) : "new";
        return el(
          "tr",
          { dataset: { document: String(hit.document), rank: String(hit.rank), score: String(hit.score) } },
          el("td", {}, String(hit.rank)),
          el("td", { class: "search-text" }, hit.text),
          el("td", {}, `${fixed(hit.score, 3)}${was ? ` (${hit.score >= was.score ? "+" : "−"}${fixed(Math.abs(hit.score - was.score), 3)})` : ""}`),
          el("td", {}, change),
        );
      }),
    ),
  );
}

// The top k re-read as pairs, [CLS] query [SEP] document [SEP]: one pass each, the A → B cells of one.
function pairsPart(found, base, context) {
  const { model } = context;
  const part = el("div", { class: "search-pairs", id: "search-pairs" });
  const layer = el("select", { id: "search-pair-layer", "aria-label": "Block" }, ...[...Array(model.layers).keys()].map((n) => new Option(`block ${n}`, String(n))));
  layer.value = String(model.layers - 1);
  const head = el("select", { id: "search-pair-head", "aria-label": "Head" }, new Option("mean of the heads", "mean"), ...[...Array(model.heads).keys()].map((n) => new Option(`head ${n}`, String(n))));
  const top = found.exact.slice(0, MAX_PAIRS);
  let shown = 0;
  const drawn = el("div", { "aria-live": "polite" });
  const go = () =>
    fillResult(drawn, `Reading ${top.length} pairs…`, async () => {
      const pairs = await api.searchPairs({
        index_id: found.index_id,
        query: found.asked,
        documents: top.map((hit) => hit.document),
        layer: Number(layer.value),
        head: head.value === "mean" ? "mean" : Number(head.value),
        shown,
      });
      drawn.replaceChildren(...showPairs(pairs, found, base, context, (place) => {
        shown = place;
        go();
      }));
    });
  const button = el("button", { type: "button", id: "search-pairs-read" }, `Re-read the top ${top.length} as pairs`);
  button.addEventListener("click", go);
  layer.addEventListener("change", () => drawn.childElementCount && go());
  head.addEventListener("change", () => drawn.childElementCount && go());
  part.append(el("h4", {}, "Bi-encoder against cross-encoder"), el("div", { class: "lesson-form" }, button, layer, head), drawn);
  return part;
}

function showPairs(pairs, found, base, context, choose) {
  const cross = pairs.cross_encoder;
  const perPair = pairs.pairs_ms / pairs.pairs.length;
  const biMs = found.query.ms + found.exact_ms;
  const reranked = cross ? [...pairs.pairs].sort((a, b) => b.relevance - a.relevance) : null;
  const rows = pairs.pairs.map((pair, place) =>
    el(
      "tr",
      { dataset: { document: String(pair.document), run: pair.run_id }, class: place === pairs.pairs.findIndex((p) => p.run_id === pairs.shown.run_id) ? "chosen" : "" },
      el("td", {}, String(place + 1)),
      el("td", { class: "search-text" }, el("button", { type: "button", class: "link", title: "Draw its A → B cells" }, pair.text)),
      el("td", {}, fixed(pair.cross_share, 3)),
      ...(cross ? [el("td", { dataset: { field: "relevance" } }, fixed(pair.relevance, 3)), el("td", {}, `#${reranked.indexOf(pair) + 1}`)] : []),
    ),
  );
  rows.forEach((row, place) => row.querySelector("button").addEventListener("click", () => choose(place)));
  return [
    el(
      "p",
      { class: "hint", dataset: { field: "not-cross" } },
      cross
        ? `${context.model.name} made the vectors; the cross-encoder “${cross}” reads each (query, document) pair as one input and scores its relevance: its ranking re-orders the top ${pairs.pairs.length}.`
        : `${context.model.name} is a bi-encoder: trained to make one vector per text, not to score a pair. Read as a pair (${pairs.layout}), its attention shows how the query's tokens read the document's, and no relevance: that takes a cross-encoder, a model with a classification head of one label trained on pairs (ATTENTION_LAB_CROSS_ENCODER names its folder).`,
    ),
    el(
      "table",
      { class: "numbers-table search-pair-table", dataset: { field: "pairs" } },
      el("thead", {}, el("tr", {}, el("th", {}, "#"), el("th", {}, "document"), el("th", { title: "Mean share of attention an A token gives the B tokens, every block and head" }, "A → B"), ...(cross ? [el("th", {}, "relevance"), el("th", {}, "re-ranked")] : []))),
      el("tbody", {}, ...rows),
    ),
    el(
      "table",
      { class: "numbers-table search-cost", dataset: { field: "cost" } },
      el("caption", {}, "What each way costs, on this lab"),
      el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", {}, "passes"), el("th", {}, "time"))),
      el(
        "tbody",
        {},
        el("tr", { dataset: { way: "bi" } }, el("th", { scope: "row" }, "bi-encoder: the query, then the index"), el("td", {}, "1"), el("td", {}, `${ms(found.query.ms)} + ${ms(found.exact_ms)}`)),
        el("tr", { dataset: { way: "pairs" } }, el("th", { scope: "row" }, `the top ${pairs.pairs.length} re-read as pairs`), el("td", {}, `${pairs.pairs.length}, in ${pairs.pair_passes} padded pass${pairs.pair_passes === 1 ? "" : "es"}`), el("td", {}, ms(pairs.pairs_ms))),
        ...(cross ? [el("tr", { dataset: { way: "cross" } }, el("th", { scope: "row" }, `the cross-encoder's relevance of the ${pairs.pairs.length}`), el("td", {}, String(pairs.pairs.length)), el("td", {}, ms(pairs.cross_ms)))] : []),
        el("tr", { dataset: { way: "corpus" } }, el("th", { scope: "row" }, "pairs over the whole corpus (estimated)"), el("td", {}, count(base.documents)), el("td", {}, `≈ ${fixed((perPair * base.documents) / 1000, 1)} s`)),
        el("tr", { dataset: { way: "index" } }, el("th", { scope: "row" }, "the index, made once before any query"), el("td", {}, `${count(base.documents)} documents in ${count(base.passes)} padded passes`), el("td", {}, `${fixed(base.seconds, 1)} s`)),
      ),
    ),
    el("p", { class: "caption" }, `Re-ranking k pairs costs k passes per query (1 + k with the query's own); reading all ${count(base.documents)} would cost ${count(base.documents)}, about ${Math.max(1, Math.round((perPair * base.documents) / biMs)).toLocaleString("en")} times the bi-encoder's query.`),
    cellsTable(pairs.shown, found, context),
  ];
}

// The A → B cells of the chosen pair as a small shaded table: rows the query's tokens (A), columns the
// document's (B), each cell its attention weight in the view.
function cellsTable(shown, found, context) {
  const largest = Math.max(...shown.cells.flat(), 1e-9);
  const head = shown.head === "mean" ? "the mean of the heads" : `head ${shown.head}`;
  const documentText = found.exact.find((hit) => hit.document === shown.document)?.text ?? "";
  return el(
    "figure",
    { class: "search-cells", dataset: { field: "cells", run: shown.run_id } },
    el("figcaption", {}, `A → B in block ${shown.layer}, ${head}: how much each query token (row) reads each document token (column); darker is more, up to ${fixed(largest, 3)}. `, pairLink(found.asked, documentText, context)),
    el(
      "div",
      { class: "search-cells-scroll" },
      el(
        "table",
        {},
        el("thead", {}, el("tr", {}, el("th", {}, ""), ...shown.cols.map((label) => el("th", { scope: "col" }, label)))),
        el(
          "tbody",
          {},
          ...shown.cells.map((row, index) =>
            el(
              "tr",
              {},
              el("th", { scope: "row" }, shown.rows[index]),
              ...row.map((value) => el("td", { style: `--share: ${(value / largest).toFixed(3)}`, title: fixed(value, 4), dataset: { value: String(value) } }, "")),
            ),
          ),
        ),
      ),
    ),
  );
}
