// The one place view state lives. Every change is mirrored into the URL, so a shared link opens the
// same view; `run` holds the current run's data and `guesses` the predict-first answers (keyed by
// run:measure:layer:head:token); neither is part of the URL, nor is `question` (a live class's question, as its
// server sends it: blind.js).
// A short view is a readable query (?text=…&layer=…). A long one (a long prompt) goes compressed into
// the fragment (#z=…), which browsers do not send to the server: a 20,000-character prompt still makes
// a link of a few kilobytes, under every server's limit on request lines.

import { VIEW_MEASURES } from "./measures.js";

const URL_KEYS = ["text", "promptName", "mask", "pooling", "layer", "head", "token", "present", "predict", "tour", "lesson", "sinks", "pair", "segments", "also", "heads", "blockMean", "panel", "scale", "classCode", "measure", "patch", "train", "writing", "model", "target", "kind"];
// An encoder-decoder's view: its target ("" for one the model writes) and which of its three kinds of attention.
export const PAIR_KINDS = ["encoder", "decoder", "cross"];
const LONGEST_QUERY = 2000; // characters; a longer view is written compressed into the fragment
const COMPRESSED = "#z=";
// A link is read within bounds, so that any link opens or is refused at once: a compressed view is inflated
// as a stream and stopped past what a view of this lab can hold (its two texts of at most maxChars
// characters, each at most 6 bytes as JSON, and its other fields), and each list in it is refused past what
// a view can name (heads: the model's; with: the tokens a run reads). A link past them opens the lab without
// its view, and the page says why.
const FIELDS_BYTES = 4096;
const MOST_FIELDS = 64;
const listeners = new Set();
let headCount = 0; // the model's heads: a mean over all of them needs no "heads" in the URL
let defaultModel = null; // a page of another model carries ?model= in its links
let defaultPrompt = ""; // the model's own default prompt: another choice (none too) goes in the link
let viewBytes = FIELDS_BYTES; // the most a view's JSON may take (set from the lab's maxChars)
let mostTokens = 0; // the most tokens a run reads: a `with` list names no more
let state = {};
let linkLimits = null;

class LinkRefused extends Error {}

// limits: {defaultModel, defaultPrompt, layers, heads, masks, poolings, prompts, tourSteps, lessons, panels, scales}, to refuse a URL
// that names a block, head, prompt, tour step, lesson, panel or colour scale that does not exist.
export async function initState(defaults, limits) {
  headCount = limits.heads;
  defaultModel = limits.defaultModel;
  defaultPrompt = limits.defaultPrompt;
  linkLimits = limits;
  const config = JSON.parse(document.getElementById("lab-config").textContent);
  viewBytes = 2 * 6 * config.maxChars + FIELDS_BYTES;
  mostTokens = config.model.max_input_tokens;
  let view = {};
  try {
    view = readView(await linkParams(window.location), limits);
  } catch (error) {
    if (!(error instanceof LinkRefused)) throw error;
    sayRefused(error.message);
  }
  state = { ...defaults, ...view, run: null, guesses: new Map() };
  return state;
}

// Said on the page's error line once the page has started: its first run clears that line as it begins.
function sayRefused(message) {
  setTimeout(() => {
    const line = document.getElementById("error");
    line.textContent = message;
    line.hidden = false;
  });
}

export function getState() {
  return state;
}

export function setState(patch) {
  const changed = Object.keys(patch).filter((key) => state[key] !== patch[key]);
  if (changed.length === 0) return;
  state = { ...state, ...patch };
  if (changed.some((key) => URL_KEYS.includes(key))) writeURL();
  for (const listener of listeners) listener(state, new Set(changed));
}

export function subscribe(listener) {
  listeners.add(listener);
}

// A link's view, read as the page reads its own on opening: a link past the bounds is refused (LinkRefused).
export async function viewOfURL(url) {
  return readView(await linkParams(new URL(url)), linkLimits);
}

async function linkParams(url) {
  if (!url.hash.startsWith(COMPRESSED)) return new URLSearchParams(url.search);
  let pairs;
  try {
    pairs = JSON.parse(await inflate(url.hash.slice(COMPRESSED.length)));
  } catch (error) {
    if (error instanceof LinkRefused) throw error;
    throw new LinkRefused("This link is damaged (cut short in copying?): the lab opened without its view.");
  }
  const fields = Array.isArray(pairs) && pairs.length <= MOST_FIELDS;
  if (!fields || !pairs.every((pair) => Array.isArray(pair) && pair.length === 2 && pair.every((part) => typeof part === "string"))) {
    throw new LinkRefused("This link does not hold a view the lab makes: the lab opened without it.");
  }
  return new URLSearchParams(pairs);
}

function readView(params, limits) {
  const view = {};
  if (params.has("text")) view.text = params.get("text");
  if (params.has("pair")) view.pair = params.get("pair");
  if (params.has("target")) view.target = params.get("target");
  if (PAIR_KINDS.includes(params.get("kind"))) view.kind = params.get("kind");
  if (["AA", "AB", "BA", "BB"].includes(params.get("segments"))) view.segments = params.get("segments");
  if (limits.masks.includes(params.get("mask"))) view.mask = params.get("mask");
  if (limits.poolings.includes(params.get("pooling"))) view.pooling = params.get("pooling");
  if (["", ...limits.prompts].includes(params.get("prompt"))) view.promptName = params.get("prompt"); // "": none
  const layer = wholeNumber(params.get("layer"));
  if (layer !== null && layer < limits.layers) view.layer = layer;
  const head = params.get("head") === "mean" ? "mean" : wholeNumber(params.get("head"));
  if (head === "mean" || (head !== null && head < limits.heads)) view.head = head;
  const heads = [...new Set(wholeNumbers(params.get("heads"), limits.heads, "heads"))].filter((h) => h < limits.heads);
  if (head === "mean" && heads.length) view.heads = heads.sort((a, b) => a - b);
  const token = wholeNumber(params.get("token"));
  if (token !== null) view.token = token;
  const also = wholeNumbers(params.get("with"), mostTokens, "tokens");
  if (token !== null && also.length) view.also = also;
  if (params.get("present") === "1") view.present = true;
  if (params.get("blocks") === "mean") view.blockMean = true;
  if (params.get("predict") === "1") view.predict = true;
  if (limits.lessons.includes(params.get("lesson"))) view.lesson = params.get("lesson");
  if (limits.panels.includes(params.get("panel"))) view.panel = params.get("panel");
  if (limits.scales.includes(params.get("scale"))) view.scale = params.get("scale");
  if (["hide", "renormalise"].includes(params.get("sinks"))) view.sinks = params.get("sinks");
  if (VIEW_MEASURES.includes(params.get("measure"))) view.measure = params.get("measure");
  if (/^[23456789A-Z]{6}$/.test(params.get("class") ?? "")) view.classCode = params.get("class");
  if (/^[a-z2-7]{26}$/.test(params.get("train") ?? "")) view.train = params.get("train");
  if (/^[a-z2-7]{26}$/.test(params.get("writing") ?? "")) view.writing = params.get("writing");
  const patch = patchOf(params.get("patch"), limits);
  if (patch) view.patch = patch;
  const tour = wholeNumber(params.get("tour"));
  if (tour !== null && tour >= 1 && tour <= limits.tourSteps) view.tour = tour;
  return view;
}

const SITES = ["resid_pre", "attention_output", "head", "ffn_output"];

// A patched run's patch (POST /api/analyze's `patch`) as a link writes it, JSON, checked as the server would
// take it; anything else is left out of the view.
function patchOf(value, limits) {
  if (!value) return null;
  let patch;
  try {
    patch = JSON.parse(value);
  } catch {
    return null;
  }
  const positions = (list) => Array.isArray(list) && list.length > 0 && list.length <= mostTokens && list.every((n) => Number.isInteger(n) && n >= 0);
  const fits =
    patch && typeof patch.source === "string" && SITES.includes(patch.site) && Number.isInteger(patch.layer) && patch.layer >= 0 && patch.layer < limits.layers &&
    (patch.site === "head" ? Number.isInteger(patch.head) && patch.head >= 0 && patch.head < limits.heads : patch.head === null) &&
    positions(patch.positions) && positions(patch.sources) && patch.positions.length === patch.sources.length;
  return fits ? { source: patch.source, site: patch.site, layer: patch.layer, head: patch.head, positions: patch.positions, sources: patch.sources } : null;
}

function wholeNumber(value) {
  return value !== null && /^\d+$/.test(value) ? Number(value) : null;
}

// The whole numbers of a comma-separated list of at most `most`; a longer list refuses the link, read no
// further than that.
function wholeNumbers(value, most, what) {
  if (!value) return [];
  const parts = value.split(",", most + 1);
  if (parts.length > most) throw new LinkRefused(`This link's view lists more ${what} than a view can (${most}): the lab opened without it.`);
  return parts.map(wholeNumber).filter((number) => number !== null);
}

let urlsWritten = 0;

async function writeURL() {
  const ticket = ++urlsWritten;
  const params = viewParams(state);
  const query = params.toString();
  // Compressed as JSON pairs, not as the query: percent-encoding triples the bytes of non-Latin text.
  // The model stays in the query even then: the server renders the page for it.
  const model = state.model !== defaultModel ? `?${new URLSearchParams({ model: state.model })}` : "";
  params.delete("model");
  const url = query.length <= LONGEST_QUERY ? `?${query}` : `${model}${COMPRESSED}${await deflate(JSON.stringify([...params]))}`;
  // Compression is asynchronous: only the latest view's URL is written.
  if (ticket === urlsWritten) window.history.replaceState(null, "", `${window.location.pathname}${url}`);
}

// A view as its link's parameters (a lesson plan's step keeps them), and such parameters read back as a
// patch of the state, each checked as a link's would be.
export function viewOf(view) {
  return Object.fromEntries(viewParams(view));
}

export function readLink(params) {
  return readView(new URLSearchParams(Object.entries(params).map(([key, value]) => [key, String(value)])), linkLimits);
}

function viewParams(state) {
  const params = new URLSearchParams();
  if (state.model !== defaultModel) params.set("model", state.model);
  params.set("text", state.text);
  if (state.promptName !== defaultPrompt) params.set("prompt", state.promptName);
  if (state.pair) params.set("pair", state.pair);
  if (state.target) params.set("target", state.target);
  if (state.kind !== "cross") params.set("kind", state.kind);
  if (state.segments !== "all") params.set("segments", state.segments);
  params.set("mask", state.mask);
  params.set("pooling", state.pooling);
  params.set("layer", String(state.layer));
  params.set("head", String(state.head));
  if (state.head === "mean" && state.heads.length !== headCount) params.set("heads", state.heads.join(","));
  if (state.token !== null) params.set("token", String(state.token));
  if (state.token !== null && state.also.length) params.set("with", state.also.join(","));
  if (state.present) params.set("present", "1");
  if (state.blockMean) params.set("blocks", "mean");
  if (state.predict) params.set("predict", "1");
  if (state.tour !== null) params.set("tour", String(state.tour));
  if (state.lesson !== null) params.set("lesson", state.lesson);
  if (state.panel !== null) params.set("panel", state.panel);
  if (state.scale !== "blues") params.set("scale", state.scale);
  if (state.sinks !== "show") params.set("sinks", state.sinks);
  if (state.measure !== "weights") params.set("measure", state.measure);
  if (state.classCode) params.set("class", state.classCode);
  if (state.patch) params.set("patch", JSON.stringify(state.patch));
  if (state.train) params.set("train", state.train);
  if (state.writing) params.set("writing", state.writing);
  return params;
}

// deflate-raw, then base64url: the URL-safe alphabet, without padding.
export async function deflate(text) {
  const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("deflate-raw"));
  const bytes = new Uint8Array(await new Response(stream).arrayBuffer());
  let binary = "";
  for (let start = 0; start < bytes.length; start += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(start, start + 0x8000));
  }
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

// Inflated as a stream and stopped past `limit` bytes (a view's, by default): deflate makes nothing much
// larger than itself, so a longer link is refused before it is decoded at all. The compressed bytes go in
// INFLATE_PIECE at a time, pulled only as the output is read: a stream inflates each piece it is given whole,
// and one piece of 390 kB that inflates to 300 MB was inflated whole before the first output could be refused.
const INFLATE_PIECE = 256; // bytes; deflate inflates at most about 1,032 times, so ≤ 264 kB out a piece
export async function inflate(encoded, limit = viewBytes) {
  const tooLarge = `This link's view is larger than the lab makes (over ${Math.round(limit / 1000)} kB): the lab opened without it.`;
  if (encoded.length > ((limit + limit / 1000 + 64) * 4) / 3) throw new LinkRefused(tooLarge);
  const binary = atob(encoded.replaceAll("-", "+").replaceAll("_", "/"));
  const bytes = Uint8Array.from(binary, (char) => char.charCodeAt(0));
  let at = 0;
  const compressed = new ReadableStream(
    {
      pull(controller) {
        if (at >= bytes.length) return controller.close();
        controller.enqueue(bytes.subarray(at, at + INFLATE_PIECE));
        at += INFLATE_PIECE;
      },
    },
    { highWaterMark: 0 },
  );
  const reader = compressed.pipeThrough(new DecompressionStream("deflate-raw")).getReader();
  const pieces = [];
  let size = 0;
  for (let piece = await reader.read(); !piece.done; piece = await reader.read()) {
    size += piece.value.length;
    if (size > limit) {
      await reader.cancel();
      throw new LinkRefused(tooLarge);
    }
    pieces.push(piece.value);
  }
  return new TextDecoder().decode(await new Blob(pieces).arrayBuffer());
}
