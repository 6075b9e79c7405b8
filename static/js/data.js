// A run's numbers, fetched once each and kept while the run is in use, and the matrix of a view
// (matrix.js) computed once per view.

import * as api from "./api.js";
import { viewMatrix, viewRow, viewSources } from "./matrix.js";

const OVERVIEW_SIZE = 64; // px per head in the 6×12 overview: the server shrinks larger matrices to this
const KEPT_RUNS = 4; // the page's run and the runs a lesson compares it with
const KEPT_VIEWS = 8; // computed matrices per run: at 512 tokens each is 1 MB
// Past this many tokens a view's matrix is not fetched whole (8,192 tokens: 256 MB a head): the heatmap draws
// it max-pooled to this many cells a side, and fetches the exact cells of the window it shows, at most this
// many a side (1 MB in float32), and a query's exact row for the attends view, predict-first and the cursor.
export const LONG_FROM = 512;
const KEPT_CELLS = 24; // windows and rows of a long run kept per run: a row at 8,192 tokens is 32 KB

const runs = new Map(); // run id → RunNumbers, least recently used first

export function numbersOf(runId) {
  let numbers = runs.get(runId);
  if (numbers) runs.delete(runId);
  else numbers = new RunNumbers(runId);
  runs.set(runId, numbers);
  while (runs.size > KEPT_RUNS) runs.delete(runs.keys().next().value);
  return numbers;
}

// The request for the [query, key] matrix a view combines: its key among a run's numbers, and the
// attention endpoint's options.
function combinedRequest(view, nLayers) {
  const { layers, heads } = viewSources(view, nLayers);
  const measure = view.measure ?? "weights";
  const which = layers.length > 1 ? { blocks: "mean" } : { layer: layers[0] };
  const chosen = heads.length > 1 ? { heads: heads.join(",") } : { head: heads[0] };
  const single = layers.length === 1 && heads.length === 1;
  const key = single ? `head:${layers[0]}:${heads[0]}:${measure}` : `mean:${JSON.stringify({ ...which, ...chosen, measure })}`;
  return { key, options: { dtype: "float32", measure, ...which, ...chosen } };
}

// The matrix a view of attention weights draws first, asked for in the analyze request itself (its
// `attention`), so that no second round trip comes before the first heatmap: options to send, then
// keep(runId, attention) with the answer's matrices. Other measures are computed (ALTI at 512 tokens
// takes seconds): null, so that the analysis is not held back for them.
export function firstView(view, nLayers) {
  const { key, options } = combinedRequest(view, nLayers);
  if (options.measure !== "weights") return null;
  return {
    // A run longer than LONG_FROM tokens answers with its overview, pooled to LONG_FROM cells a side.
    options: { ...options, size: LONG_FROM },
    keep(runId, attention) {
      if (!attention) return; // past 1 MiB: the view asks the attention endpoint
      const decoded = api.decodeAttention(attention);
      const numbers = numbersOf(runId);
      if (attention.pooling) numbers.once(`overview:${key}`, async () => decoded);
      else numbers.once(key, async () => decoded.values);
    },
  };
}

export class RunNumbers {
  constructor(runId) {
    this.runId = runId;
    this.cache = new Map();
    this.views = new Map(); // view key → promise of its matrix, least recently used first
  }

  once(key, load) {
    if (!this.cache.has(key)) {
      const promise = load();
      promise.catch(() => this.cache.delete(key)); // a failed fetch may be tried again
      this.cache.set(key, promise);
    }
    return this.cache.get(key);
  }

  // One block of a measure (api.attention's measure: weights, norm, alti…), exact float32: [head, query, key].
  block(layer, measure = "weights") {
    return this.once(`layer:${layer}:${measure}`, async () => (await api.attention(this.runId, { dtype: "float32", layer, measure })).values);
  }

  // The [query, key] matrix a view combines before its sinks and segments: one head (a twelfth of its
  // block, so the first heatmap comes fast; cut from the block where that is here already), or the mean
  // of several heads or of every block, which the server computes (one N×N matrix, not every head's).
  async combined(view, nLayers, n) {
    const { key, options } = combinedRequest(view, nLayers);
    const block = key.startsWith("head:") && this.cache.get(`layer:${options.layer}:${options.measure}`);
    if (block) return block.then((values) => values.subarray(options.head * n * n, (options.head + 1) * n * n));
    return this.once(key, async () => (await api.attention(this.runId, options)).values);
  }

  // The matrix a view shows (matrix.viewMatrix), computed once per view of this run.
  matrix(view, tokens, nLayers) {
    const { layer, head, heads, blockMean, sinks, segments, measure = "weights" } = view;
    const key = JSON.stringify({ layer: blockMean ? null : layer, head, heads: head === "mean" ? heads : null, blockMean, sinks, segments, measure });
    let matrix = this.views.get(key);
    if (matrix) this.views.delete(key);
    else {
      // The combined matrix is the view's one block with one head: viewMatrix then hides sinks and segments.
      const alone = { ...view, layer: 0, head: 0, heads: [0], blockMean: false, measure: "weights" };
      matrix = this.combined(view, nLayers, tokens.length).then((values) => viewMatrix([[values]], tokens, alone));
      matrix.catch(() => this.views.delete(key));
    }
    this.views.set(key, matrix);
    while (this.views.size > KEPT_VIEWS) this.views.delete(this.views.keys().next().value);
    return matrix;
  }

  // A long run's view ([query, key] of one head or a mean, before sinks and segments) pooled to LONG_FROM
  // cells a side, each the largest of its bin: {values, shape, window, pooling}.
  pooledView(view, nLayers) {
    const { key, options } = combinedRequest(view, nLayers);
    return this.once(`overview:${key}`, () => api.attention(this.runId, { ...options, size: LONG_FROM }));
  }

  // A window of a long run's view: rows [row, row + size) × cols [col, col + size), exact up to LONG_FROM a
  // side, else pooled to it ({values, shape, window, pooling}).
  windowOf(view, nLayers, { row, col, size }) {
    const { key, options } = combinedRequest(view, nLayers);
    const window = { rows: `${row}:${row + size}`, cols: `${col}:${col + size}`, size: LONG_FROM };
    return this.kept(`window:${key}:${row}:${col}:${size}`, () => api.attention(this.runId, { ...options, ...window }));
  }

  // The exact row of one query in a view before sinks and segments: Float32Array over every key.
  rawRow(view, nLayers, n, query) {
    const { key, options } = combinedRequest(view, nLayers);
    const fetched = () => api.attention(this.runId, { ...options, rows: `${query}:${query + 1}`, cols: `0:${n}` });
    return this.kept(`row:${key}:${query}`, async () => (await fetched()).values);
  }

  // One query's row of a view as the heatmap shows it (sinks and segments applied, matrix.viewRow), and the
  // weight on its hidden sinks: cut from the whole matrix, or fetched alone for a long run.
  async row(view, tokens, nLayers, query) {
    const n = tokens.length;
    if (n <= LONG_FROM) {
      const { matrix, sink } = await this.matrix(view, tokens, nLayers);
      return { row: matrix.subarray(query * n, (query + 1) * n), sink: sink === null ? null : sink[query] };
    }
    return viewRow(await this.rawRow(view, nLayers, n, query), tokens, query, view);
  }

  // What is computed for a long run's windows and rows, least recently used first, at most KEPT_CELLS.
  kept(key, load) {
    this.cells ??= new Map();
    let promise = this.cells.get(key);
    if (promise) this.cells.delete(key);
    else {
      promise = load();
      promise.catch(() => this.cells.delete(key));
    }
    this.cells.set(key, promise);
    while (this.cells.size > KEPT_CELLS) this.cells.delete(this.cells.keys().next().value);
    return promise;
  }

  // Every head of every block, quantised and shrunk to what the overview draws.
  overview(measure = "weights") {
    return this.once(`overview:${measure}`, () => api.attention(this.runId, { size: OVERVIEW_SIZE, measure }));
  }

  query(layer, head, token) {
    return this.once(`query:${layer}:${head}:${token}`, () => api.query(this.runId, layer, head, token));
  }

  trace(index) {
    return this.once(`token:${index}`, () => api.tokenTrace(this.runId, index));
  }

  // The LM head's best next tokens after token `index` (a model with an LM head only).
  nextTokens(index) {
    return this.once(`next:${index}`, () => api.nextTokens(this.runId, index));
  }

  // The sentence vector: the analyze answer's (`known`), or fetched once for an input longer than the
  // model's max_seq_length, whose vector the server computes only when asked for.
  pooled(known) {
    return known ? Promise.resolve(known) : this.once("pooled", () => api.pooled(this.runId));
  }

  headStats() {
    return this.once("head-stats", () => api.headStats(this.runId));
  }
}
