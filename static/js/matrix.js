// Every attention matrix the page shows comes from this one function of the view: one head, a mean over
// chosen heads, a mean over every block, with the sink columns hidden (and the rest renormalised) and a
// segment filter. The heatmap, the attends view, the difference view, predict-first, the grid and the
// exports all call viewMatrix, so two views of the same row can never disagree. Pure: no fetching, no DOM
// (the names of views come from the measures' declaration, measures.js).
//
// blocks: per block, the model's float32 weights as one Float32Array [head, query, key] flattened, or as
//   an array of per-head Float32Arrays [query, key] (then only the heads the view reads need be there).
// tokens: the run's tokens ({special, start, end, segment}); n = tokens.length.
// view: {layer, head (a number or "mean"), heads (the heads "mean" averages), blockMean, sinks, segments}
//   sinks: "show" | "hide" | "renormalise"; segments: "all" | "AA" | "AB" | "BA" | "BB".

import { count } from "./format.js";
import { measureOf, titled } from "./measures.js";

// The tokens the sink controls hide: the ones the tokenizer adds around the text ([CLS]/[SEP], <s>/</s>;
// the API's `added`). A special id typed in the text or an [UNK] keeps its place.
export function isSink(token) {
  return token.added;
}

// The hidden tokens' names as the run writes them, e.g. "[CLS]+[SEP]": what every label of the sink says.
export function sinkNames(tokens) {
  return [...new Set(tokens.filter(isSink).map((token) => token.text))].join("+");
}

function headWeights(block, head, n) {
  return Array.isArray(block) ? block[head] : block.subarray(head * n * n, (head + 1) * n * n);
}

// The mean of the chosen heads of one block, [query, key], summed in float64.
export function headMean(block, heads, n) {
  if (heads.length === 1) return headWeights(block, heads[0], n);
  const sum = new Float64Array(n * n);
  for (const head of heads) headWeights(block, head, n).forEach((value, cell) => (sum[cell] += value));
  return Float32Array.from(sum, (value) => value / heads.length);
}

// Which blocks and heads a view reads: the chosen block or all of them; one head or the head set.
export function viewSources(view, nLayers) {
  const layers = view.blockMean ? [...Array(nLayers).keys()] : [view.layer];
  // ALTI measures a block as a whole: one matrix per block, whatever head is chosen.
  if (isPerBlock(view.measure)) return { layers, heads: [0] };
  const heads = view.head === "mean" ? view.heads : [view.head];
  return { layers, heads };
}

export function isPerBlock(measure) {
  return measureOf(measure).per_block;
}

// The matrix a view shows: {matrix: Float32Array [query, key] with NaN for every cell the view leaves out,
// sink: Float32Array per query row of what the hidden sink columns held (withoutSinks), or null when none
// are hidden}.
export function viewMatrix(blocks, tokens, view) {
  const n = tokens.length;
  const { layers, heads } = viewSources(view, blocks.length);
  let matrix;
  if (layers.length === 1) matrix = headMean(blocks[layers[0]], heads, n);
  else {
    const sum = new Float64Array(n * n);
    for (const layer of layers) headMean(blocks[layer], heads, n).forEach((value, cell) => (sum[cell] += value));
    matrix = Float32Array.from(sum, (value) => value / layers.length);
  }
  const { matrix: kept, sink } = withoutSinks(matrix, tokens, view.sinks);
  return { matrix: filterSegments(kept, tokens, view.segments), sink };
}

// Sink columns blanked (NaN) and what they held per row returned as `sink`, so nothing is silently dropped.
// "renormalise" divides each row's kept cells by their own sum (never by 1 − sink: a softmax row does not
// sum to exactly 1, and a row that keeps almost nothing would be visibly off); the cells are then shares, so
// the sink is too, in the same unit: the sink columns' share of the row's total before the division (for
// the weights, within rounding their sum; for a measure in lengths, not a length beside shares).
export function withoutSinks(matrix, tokens, mode) {
  if (mode === "show") return { matrix, sink: null };
  const n = tokens.length;
  const hidden = tokens.map(isSink);
  const kept = new Float32Array(n * n);
  const sink = new Float32Array(n);
  for (let row = 0; row < n; row += 1) {
    sink[row] = rowWithoutSinks(matrix.subarray(row * n, (row + 1) * n), hidden, mode, kept.subarray(row * n, (row + 1) * n));
  }
  return { matrix: kept, sink };
}

// One row of withoutSinks: the kept values written into `out`, the hidden keys' value returned (their sum,
// or under "renormalise" their share of the row's total).
function rowWithoutSinks(values, hidden, mode, out) {
  let sinkSum = 0;
  let keptSum = 0;
  values.forEach((value, col) => {
    if (hidden[col]) sinkSum += value;
    else keptSum += value;
  });
  const renormalise = mode === "renormalise";
  const scale = renormalise && keptSum > 0 ? 1 / keptSum : 1;
  values.forEach((value, col) => (out[col] = hidden[col] ? NaN : value * scale));
  if (!renormalise) return sinkSum;
  return sinkSum + keptSum > 0 ? sinkSum / (sinkSum + keptSum) : 0;
}

// One query's row of a view as viewMatrix would show it, from that row of the combined matrix (before sinks
// and segments): {row: Float32Array over every key with NaN where the view leaves a key out, sink: what the
// hidden sinks held (withoutSinks), or null}. What a long run's views read instead of its whole matrix.
export function viewRow(values, tokens, query, view) {
  let row = values;
  let sink = null;
  if (view.sinks !== "show") {
    row = new Float32Array(values.length);
    sink = rowWithoutSinks(values, tokens.map(isSink), view.sinks, row);
  }
  const rule = segmentRule(view.segments);
  if (rule !== null) row = row.map((value, key) => (tokens[query].segment === rule.from && tokens[key].segment === rule.to ? value : NaN));
  return { row, sink };
}

// Sentence pairs: "AB" keeps queries in segment A looking at keys in segment B (bertviz's sentence-A/B
// view); every other cell is blanked (NaN), shown as empty, not as 0.
export function segmentRule(segments) {
  return segments === "all" ? null : { from: segments[0], to: segments[1] };
}

export function filterSegments(matrix, tokens, segments) {
  const rule = segmentRule(segments);
  if (rule === null) return matrix;
  const n = tokens.length;
  return matrix.map((value, cell) =>
    tokens[Math.floor(cell / n)].segment === rule.from && tokens[cell % n].segment === rule.to ? value : NaN,
  );
}

// Several selected queries: the mean of their rows (each row sums to 1 over what it keeps, so the mean does
// too). A blanked cell stays blank.
export function meanRow(matrix, n, rows) {
  const sum = new Float64Array(n);
  for (const row of rows) for (let key = 0; key < n; key += 1) sum[key] += matrix[row * n + key];
  return Float32Array.from(sum, (value) => value / rows.length);
}

export function meanOf(values, rows) {
  return rows.reduce((sum, row) => sum + values[row], 0) / rows.length;
}

// How the heatmap's title, the difference view, predict-first and the exports name a view, its measure first
// (measures.js): "norm-weighted block 3, head 7", "ALTI · block 2" (one picture per block), "norm-weighted,
// renormalised block 3, head 7" with the special tokens hidden and the rows rescaled.
export function viewName(view, model) {
  const measure = measureOf(view.measure, view.sinks);
  const block = view.blockMean ? `all ${count(model.layers, "block")} averaged` : `block ${view.layer}`;
  if (measure.per_block) return `${measure.short} · ${block}`;
  if (view.head !== "mean") return titled(measure, `${block}, head ${view.head}`);
  const heads = view.heads.length === model.heads ? `all ${count(model.heads, "head")} averaged` : `heads ${view.heads.join(", ")} averaged`;
  return titled(measure, `${block}, ${heads}`);
}

// The blocks a view draws: one, or every block for the block mean.
export function viewLayers(view, model) {
  return view.blockMean ? [...Array(model.layers).keys()] : [view.layer];
}

// How those blocks mask attention: "causal mask", and where a block slides (model.windows: a token sees the
// tokens fewer than `window` positions away, before it under the causal mask, on either side otherwise), its window.
export function maskName(mask, model, layers) {
  const sliding = layers.filter((layer) => model.windows[layer] !== null);
  if (!sliding.length) return `${mask} mask`;
  const sizes = [...new Set(sliding.map((layer) => model.windows[layer]))].join("/");
  const where = sliding.length === layers.length ? "" : ` in block${sliding.length > 1 ? "s" : ""} ${sliding.join(", ")}`;
  return `${mask} mask, sliding window of ${sizes} tokens${where}`;
}

// Whether those blocks scale q·k by 1/√d, as most models do (model.scales: a GPT-2 may divide by the
// block's number too, or not scale at all).
export function scaledByRootD(model, layers) {
  return layers.every((layer) => Math.abs(model.scales[layer] * Math.sqrt(model.head_dim) - 1) < 1e-9);
}

// The same, as a file name, the measure always in it: attention-weights-block2-head5,
// attention-norm-blocks-mean-heads-1-4-9-mean, attention-alti-block3, …
export function viewFileName(view, model) {
  const block = view.blockMean ? "blocks-mean" : `block${view.layer}`;
  const heads = isPerBlock(view.measure) ? null : view.head !== "mean" ? `head${view.head}` : view.heads.length === model.heads ? "heads-mean" : `heads-${view.heads.join("-")}-mean`;
  const filters = [view.sinks !== "show" ? `sinks-${view.sinks}` : null, view.segments !== "all" ? view.segments : null];
  return ["attention", measureOf(view.measure).key.replace("_", "-"), block, heads, ...filters].filter(Boolean).join("-");
}
