// The lab's HTTP API, and the sentence a person sees when something goes wrong.

export class ApiError extends Error {}

async function request(url, options = {}) {
  let response;
  try {
    response = await fetch(url, options);
  } catch {
    throw new ApiError("The lab server is not answering. Is it still running?");
  }
  if (!response.ok) throw new ApiError(await explain(response));
  return response;
}

async function explain(response) {
  let detail = "";
  try {
    detail = (await response.json()).detail ?? "";
  } catch {
    // A body that is not JSON says nothing more than its status.
  }
  if (response.status === 413) return `That text is too long: ${detail}.`;
  if (response.status === 404 && detail.includes("analyze the text again")) {
    return "This run is no longer kept by the server. Press Run to analyze the text again.";
  }
  if (response.status === 422 && detail.includes("empty")) return "Type some text first.";
  if (response.status === 422 && detail.includes("no characters")) {
    return "The model cannot read any of those characters. Try ordinary words.";
  }
  if (response.status === 503) return "The lab is busy with other people's prompts. Try again in a moment.";
  if (response.status >= 500) return "The lab hit a problem with that request. Try again, or try another text.";
  return detail ? `The lab could not do that: ${detail}.` : `The lab could not do that (error ${response.status}).`;
}

export async function analyze({ text, mask, pooling }) {
  const response = await request("/api/analyze", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ text, mask, pooling }),
  });
  return response.json();
}

export async function head(runId, layer, headIndex) {
  return (await request(`/api/runs/${runId}/layers/${layer}/heads/${headIndex}`)).json();
}

export async function layer(runId, layerIndex) {
  return (await request(`/api/runs/${runId}/layers/${layerIndex}`)).json();
}

export async function embeddings(runId) {
  return (await request(`/api/runs/${runId}/embeddings`)).json();
}

export async function tokenTrace(runId, index) {
  return (await request(`/api/runs/${runId}/tokens/${index}`)).json();
}

export async function query(runId, layer, headIndex, queryIndex) {
  return (await request(`/api/runs/${runId}/layers/${layer}/heads/${headIndex}/queries/${queryIndex}`)).json();
}

// Weights as [layer, head, query, key] in one flat typed array: Float32Array (exact) for float32,
// Uint8Array for uint8 (weight = byte / scale, ±1/510). options: dtype, layer, head, size.
export async function attention(runId, options = {}) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(options)) if (value !== null && value !== undefined) params.set(name, String(value));
  const response = await request(`/api/runs/${runId}/attention?${params}`);
  const shape = response.headers.get("X-Attention-Shape").split(",").map(Number);
  const buffer = await response.arrayBuffer();
  if (response.headers.get("X-Attention-Dtype") === "uint8") {
    return { shape, values: new Uint8Array(buffer), scale: Number(response.headers.get("X-Attention-Scale")) };
  }
  return { shape, values: new Float32Array(buffer), scale: 1 };
}
