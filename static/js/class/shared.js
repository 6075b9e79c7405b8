// The view a class shares: what the URL carries, less what is one person's own (presentation, colours,
// predict-first). The teacher's page sends it; a following learner's page applies it; a lesson plan's step
// applies it too. `train` is the training the teacher's Grow panel follows, `writing` the writing its Write panel
// shows: a learner's follows each live.

import { runPrompt } from "../controls.js";

export const SHARED = ["model", "text", "pair", "mask", "pooling", "layer", "head", "heads", "blockMean", "token", "also", "panel", "tour", "sinks", "segments", "lesson", "measure", "train", "writing", "target", "kind"];
const RUN_INPUTS = ["text", "pair", "mask", "pooling", "target"];

export function sharedView(state) {
  return Object.fromEntries(SHARED.map((key) => [key, state[key]]));
}

// A view applied: a new prompt runs the model (resolves once the run is there); the rest only moves the
// views. A view of another model is another page, opened with the class (and its step) carried along, and an
// encoder-decoder's target and kind of attention.
export async function applyView(lab, view, carried = {}) {
  const before = lab.getState();
  if (view.model && view.model !== before.model) {
    const pair = { ...(view.target ? { target: view.target } : {}), ...(view.kind && view.kind !== "cross" ? { kind: view.kind } : {}) };
    const params = { model: view.model, text: view.text ?? before.text, ...pair, ...(before.classCode ? { class: before.classCode } : {}), ...carried };
    window.location.assign(`/?${new URLSearchParams(params)}`);
    return false;
  }
  const patch = Object.fromEntries(SHARED.filter((key) => key in view && key !== "model").map((key) => [key, view[key]]));
  lab.setState(patch);
  if (RUN_INPUTS.some((key) => key in patch && patch[key] !== before[key]) || !before.run) await runPrompt(lab);
  return true;
}
