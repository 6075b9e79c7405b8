// The current run's numbers, fetched once each and kept until the next run.

import * as api from "./api.js";

let runId = null;
let cache = new Map();

export function useRun(id) {
  if (id !== runId) {
    runId = id;
    cache = new Map();
  }
}

function once(key, load) {
  if (!cache.has(key)) {
    const promise = load();
    promise.catch(() => cache.delete(key)); // a failed fetch may be tried again
    cache.set(key, promise);
  }
  return cache.get(key);
}

const OVERVIEW_SIZE = 64; // px per head in the 6×12 overview: the server shrinks larger matrices to this

// Exact float32 weights of one block: Float32Array [head, query, key].
export function layerWeights(layer) {
  return once(`layer:${layer}`, async () => (await api.attention(runId, { dtype: "float32", layer })).values);
}

// One head's exact weights, [query, key]: a twelfth of the block, so the first heatmap comes fast.
export function headWeights(layer, head, n) {
  const block = cache.get(`layer:${layer}`);
  if (block) return block.then((values) => values.subarray(head * n * n, (head + 1) * n * n));
  return once(`head:${layer}:${head}`, async () => (await api.attention(runId, { dtype: "float32", layer, head })).values);
}

// Every head of every block, quantised and shrunk to what the overview draws.
export function overview() {
  return once("overview", () => api.attention(runId, { size: OVERVIEW_SIZE }));
}

export function queryNumbers(layer, head, token) {
  return once(`query:${layer}:${head}:${token}`, () => api.query(runId, layer, head, token));
}

export function tokenTrace(index) {
  return once(`token:${index}`, () => api.tokenTrace(runId, index));
}

// One head's matrix, or for "mean" the mean of the chosen heads (all of them by default), as a
// Float32Array [query, key].
export async function headMatrix(layer, head, nHeads, n, chosen = null) {
  if (head !== "mean") return headWeights(layer, head, n);
  const heads = chosen ?? [...Array(nHeads).keys()];
  const weights = await layerWeights(layer);
  const mean = new Float32Array(n * n);
  for (const h of heads) {
    for (let cell = 0; cell < n * n; cell += 1) mean[cell] += weights[h * n * n + cell];
  }
  return mean.map((sum) => sum / heads.length);
}

// What the heatmap shows: headMatrix for one block, or its mean over every block (blockMean).
export async function viewMatrix(layer, head, n, { nHeads, nLayers, heads, blockMean }) {
  if (!blockMean) return headMatrix(layer, head, nHeads, n, heads);
  const blocks = await Promise.all(Array.from({ length: nLayers }, (_, l) => headMatrix(l, head, nHeads, n, heads)));
  return blocks[0].map((_, cell) => blocks.reduce((sum, block) => sum + block[cell], 0) / nLayers);
}
