// What a model without an adapter cannot show (GET /api/model's capabilities: qkv, worked_example, ffn,
// measures, ablation, pipeline), and the sentence that says why, as the server words it.

import { el } from "./format.js";

// The reason a view needing `need` is not offered for this model, or null when it is.
export function missing(model, need) {
  return model.capabilities[need] ? null : model.attention_only;
}

// What a view that needs `need` draws in its place.
export function unavailableNote(model, need) {
  return el("p", { class: "hint unavailable", dataset: { field: "unavailable", need } }, `Not available for ${model.name}: ${missing(model, need)}.`);
}
