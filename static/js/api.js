// The lab's HTTP API, and the sentence a person sees when something goes wrong.

export class ApiError extends Error {}

// How a request reaches the lab: the browser's fetch on the page; a notebook's widget gives its own, which
// carries the same request to the kernel and its answer back (app/notebook/widget.js).
let send = (url, options) => fetch(url, options);

export function sendWith(transport) {
  send = transport;
}

async function request(url, options = {}) {
  let response;
  try {
    response = await send(url, options);
  } catch (error) {
    if (error.name === "AbortError") throw error; // the page called it off: not the lab's failing
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
  if (response.status === 429 && detail.includes("ATTENTION_LAB_CORPUS_BYTES_PER_HOUR")) {
    return `This device has sent as many new corpora as the lab keeps from it in an hour: ${detail}.`;
  }
  if (response.status === 429) return "You already have several requests waiting for the model. Wait for them, then try again.";
  if (response.status === 404 && detail.includes("analyze the text again")) {
    return "This run is no longer kept by the server. Press Run to analyze the text again.";
  }
  if (response.status === 422 && detail.includes("empty")) return "Type some text first.";
  if (response.status === 422 && detail.includes("no characters")) {
    return "The model cannot read any of those characters. Try ordinary words.";
  }
  // 503 with Retry-After: the model's queue is full; without it, something the lab needs is down (its
  // run store, say), and the server's sentence says what.
  if (response.status === 503 && response.headers.has("Retry-After")) return "The lab is busy with other people's prompts. Try again in a moment.";
  if (response.status === 503 && detail) return `The lab cannot answer just now: ${detail}.`;
  if (response.status >= 500) return "The lab hit a problem with that request. Try again, or try another text.";
  return detail ? `The lab could not do that: ${detail}.` : `The lab could not do that (error ${response.status}).`;
}

async function post(url, body) {
  const response = await request(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return response.json();
}

// ablate: [[layer, head], ...] switched off (their context zeroed before W_O).
// textPair: an optional second sentence, segment B; ablate: [[layer, head], ...] switched off.
// The model this page reads: every run it asks for is that model's.
let pageModel = null;

export function useModel(name) {
  pageModel = name;
}

// attention: the attention endpoint's options for matrices to answer with (decodeAttention reads them).
// prompt: one of the model's prompts by name, "" for none; null: the model's default prompt.
export function analyze({ text, textPair = null, mask, pooling, ablate = [], attention = null, prompt = null, patch = null }) {
  return post("/api/analyze", { text, text_pair: textPair || null, mask, pooling, ablate, model: pageModel, attention, prompt, patch });
}

// An encoder-decoder's run: the source, and the target to read ("" or null: the model writes one, greedily).
export function analyzePair({ source, target }) {
  return post("/api/analyze", { text: source, target: target || null, model: pageModel });
}

// Where an encoder-decoder's run is saved whole (format: "csv" or "json").
export function pairExportURL(runId, format) {
  return `/api/encoder-decoder/${encodeURIComponent(runId)}/export?format=${format}`;
}

export async function compare(a, b, tokenA, tokenB) {
  const params = new URLSearchParams({ a, b, token_a: String(tokenA), token_b: String(tokenB) });
  return (await request(`/api/compare?${params}`)).json();
}

// The sentence vector of a run whose input is longer than the model's max_seq_length (a pass of its own).
export async function pooled(runId) {
  return (await request(`/api/runs/${runId}/pooled`)).json();
}

export async function headStats(runId) {
  return (await request(`/api/runs/${runId}/head-stats`)).json();
}

export async function rollout(runId, index) {
  return (await request(`/api/runs/${runId}/tokens/${index}/rollout`)).json();
}

export async function nearest(runId, index, k = 5) {
  return (await request(`/api/runs/${runId}/tokens/${index}/nearest?k=${k}`)).json();
}

// Integrated Gradients of the cosine between text's and other's sentence vectors, per token of text.
export async function nextTokens(runId, index, k = 5) {
  return (await request(`/api/runs/${runId}/tokens/${index}/next?k=${k}`)).json();
}

// target "similarity" (to `other`) or "next_token" (the LM head's logit of its best next token).
export function attribution({ text, other = null, target = "similarity", method = "integrated_gradients" }) {
  return post("/api/attribution", { text, other, target, method, model: pageModel });
}

// prompt: one of the model's prompts by name, compared with in place of the prefix.
export function pooling({ text, mask, prefix, prompt = null }) {
  return post("/api/pooling", { text, mask, prefix, prompt, model: pageModel });
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
  // The query rows and key columns the body covers, and whether its cells are pooled bins ("max") or exact.
  const window = response.headers.get("X-Attention-Window").split(",").map(Number);
  const pooling = response.headers.get("X-Attention-Pooling");
  const buffer = await response.arrayBuffer();
  if (response.headers.get("X-Attention-Dtype") === "uint8") {
    return { shape, window, pooling, values: new Uint8Array(buffer), scale: Number(response.headers.get("X-Attention-Scale")) };
  }
  return { shape, window, pooling, values: new Float32Array(buffer), scale: 1 };
}

// Matrices an analyze answer holds (its `attention`), as attention() gives them.
export function decodeAttention({ shape, dtype, scale, window, pooling, data }) {
  const bytes = fromBase64(data);
  return { shape, window, pooling, values: dtype === "uint8" ? bytes : new Float32Array(bytes.buffer), scale: scale ?? 1 };
}

function fromBase64(data) {
  if (Uint8Array.fromBase64) return Uint8Array.fromBase64(data);
  const text = atob(data);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i += 1) bytes[i] = text.charCodeAt(i);
  return bytes;
}

// Activation patching (POST /api/patch): `text` (A) run again with B's activation at a site; a sweep over
// blocks_positions or blocks_heads. Answers {a_tokens, b_tokens, target, a, b, cells: [{layer, head,
// positions, sources, value, to_a}]}.
export function patch(ask) {
  return post("/api/patch", { ...ask, model: pageModel });
}

export function scoreboard(ask) {
  return post("/api/scoreboard", { ...ask, model: pageModel });
}

// A long computation the lab names by a POST (an atlas's corpus run, a search index) and computes while a GET of
// its URL waits: its answer, with its progress ({state, done, total} at `${url}/progress`, the same on every worker)
// told to onProgress(done, total) meanwhile. Aborting `signal` ends the request, and with it the computation at its
// next slice once nobody else waits for it.
export async function longJob(url, { signal, onProgress = () => {}, every = 300 } = {}) {
  const poll = setInterval(async () => {
    const said = await request(`${url}/progress`).then((response) => response.json(), () => null);
    if (said?.total) onProgress(said.done, said.total);
  }, every);
  try {
    return (await request(url, { signal })).json();
  } finally {
    clearInterval(poll);
  }
}

// A long computation's answer where this lab keeps it computed (its progress says "done"), else null: asking for
// one it does not keep would start it.
export async function keptJob(url) {
  try {
    const said = await (await request(`${url}/progress`)).json();
    return said.state === "done" ? (await request(url)).json() : null;
  } catch (error) {
    if (error instanceof ApiError) return null;
    throw error;
  }
}

// The head atlas (the atlas page): a corpus run named by its sentences (none: the lab's own), then computed as a
// long job (longJob(atlasUrl(id))); one head's queries and keys projected in one space.
export function startAtlas(body) {
  return post("/api/atlas", body);
}

export const atlasUrl = (atlasId) => `/api/atlas/${atlasId}`;

export async function atlasSpace(atlasId, layer, headIndex, method) {
  return (await request(`${atlasUrl(atlasId)}/layers/${layer}/heads/${headIndex}/space?method=${method}`)).json();
}

// Search (the search lesson): an index named by its corpus (null: the lab's own), the prompt or typed prefix
// every document is read with, then computed as a long job (longJob(indexUrl(id))); a query's top k, exact and
// from the HNSW graph; the top k re-read as pairs.
export function startIndex({ documents = null, prompt = null, prefix = "" }) {
  return post("/api/search/index", { documents, prompt, prefix, model: pageModel });
}

export const indexUrl = (indexId) => `/api/search/index/${indexId}`;

export function search(ask) {
  return post("/api/search", ask);
}

export function searchPairs(ask) {
  return post("/api/search/pairs", ask);
}

// A writing (POST /api/generate/stream): a decoder continues `text` token by token, as model.generate does with the
// same knobs (transformers' names: max_new_tokens, do_sample, temperature, top_k, top_p, seed). Each server-sent
// event goes to onEvent(name, data, answer) as it comes ("writing", then a "step" per token, then "done"), with the
// answer put together so far, which is returned at the end ({...writing, steps, ...done}: POST /api/generate's).
// Aborting `signal` leaves the stream: the lab calls the writing off at its next token once nobody else follows it.
export async function write(knobs, { signal, onEvent = () => {} } = {}) {
  const response = await request("/api/generate/stream", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...knobs, model: pageModel }),
    signal,
  });
  return writingOf(response, onEvent);
}

// A writing named by its id, followed (GET /api/generate/{id}/stream: a class's teacher's, a link's): the one
// under way from its first token, the one that ended as the lab kept it, or written again from its spec (the same
// tokens), told as write() tells its own.
export async function followWriting(writingId, { signal, onEvent = () => {} } = {}) {
  return writingOf(await request(`/api/generate/${writingId}/stream`, { signal }), onEvent);
}

async function writingOf(response, onEvent) {
  const answer = { steps: [] };
  const take = (block) => {
    const fields = {};
    for (const line of block.split("\n")) {
      const colon = line.indexOf(": ");
      if (colon > 0) fields[line.slice(0, colon)] = line.slice(colon + 2);
    }
    if (!fields.event) return;
    const data = JSON.parse(fields.data);
    if (fields.event === "error") throw new ApiError(`The model stopped writing: ${data.detail}.`);
    if (fields.event === "step") answer.steps.push(data);
    else Object.assign(answer, data);
    onEvent(fields.event, data, answer);
  };
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
      take(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
    }
  }
  return answer;
}

// Growing a model (app/web/training.py): a spec ({} is the induction recipe) starts a training, named by its
// train_id; its status carries its curves, its checkpoints' head scores and their served model names. In a
// class, the teacher's {code, secret} goes with a start and with a pause, resume or cancel.
function teacherHeaders(teacher) {
  return { "content-type": "application/json", ...(teacher ? { "X-Class-Secret": teacher.secret } : {}) };
}

export async function startTraining(spec = {}, teacher = null) {
  const body = teacher ? { ...spec, class_code: teacher.code } : spec;
  return (await request("/api/train", { method: "POST", headers: teacherHeaders(teacher), body: JSON.stringify(body) })).json();
}

export async function training(trainId) {
  return (await request(`/api/train/${trainId}`)).json();
}

export async function trainings() {
  return (await request("/api/train")).json();
}

// move: "pause", "resume" or "cancel".
export async function moveTraining(trainId, move, teacher = null) {
  return (await request(`/api/train/${trainId}/${move}`, { method: "POST", headers: teacherHeaders(teacher) })).json();
}
