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

// Exact float32 weights of one block: Float32Array [head, query, key].
export function layerWeights(layer) {
  return once(`weights:${layer}`, async () => (await api.attention(runId, { dtype: "float32", layer })).values);
}

// Every block's weights, quantised to uint8 on the wire (±1/510): for the 72-head overview.
export function allWeights() {
  return once("weights:all", async () => (await api.attention(runId)).values);
}

export function headNumbers(layer, head) {
  return once(`head:${layer}:${head}`, () => api.head(runId, layer, head));
}

export function tokenTrace(index) {
  return once(`token:${index}`, () => api.tokenTrace(runId, index));
}

// One head's matrix, or the mean of all heads, as a Float32Array [query, key].
export async function headMatrix(layer, head, nHeads, n) {
  const weights = await layerWeights(layer);
  if (head !== "mean") return weights.subarray(head * n * n, (head + 1) * n * n);
  const mean = new Float32Array(n * n);
  for (let h = 0; h < nHeads; h += 1) {
    for (let cell = 0; cell < n * n; cell += 1) mean[cell] += weights[h * n * n + cell];
  }
  return mean.map((sum) => sum / nHeads);
}
