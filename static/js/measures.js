// What a number of the lab is called, declared once per measure (app/engine/measures.py, MEASURES) and sent in
// the page's config: every label, readout, title, aria-label, hint, verdict, tooltip, colour bar and export
// reads it from here, so a value above 1 is never called an attention weight.
//   key       the API's measure= ("difference" for one measure of two runs subtracted)
//   symbol    a cell's value as a formula names it, "A[i,j]"; name: one value in words, "attention weight"
//   short     in a title before the view ("norm-weighted block 3, head 7"; "" for the weights)
//   values    its unit or range; meaning: one line a learner can read; per_block: one picture per block
//   sink      what the sink column holds with the special tokens hidden
//   renormalised  the symbol, name, short, values, meaning and sink of its cells under "hide and
//             renormalise": shares of the kept tokens' total, whatever the measure

import { byId } from "./root.js";

const config = JSON.parse(byId("lab-config").textContent);

export const MEASURES = config.measures;
// The measures a view can be drawn in (the Measure control's choices), in the declaration's order.
export const VIEW_MEASURES = config.viewMeasures;

// The words of a view's cells: its measure's, or, with the special tokens hidden and each row rescaled
// (sinks "renormalise"), its renormalised words.
export function measureOf(key = "weights", sinks = "show") {
  const measure = MEASURES[key];
  if (!measure) throw new Error(`no measure is declared as “${key}”`);
  return sinks === "renormalise" ? { ...measure, ...measure.renormalised } : measure;
}

// Why a measure with one picture per block (ALTI) names no head, for the head picker and the exports; null
// for a measure of heads.
export function noHead(measure) {
  return measure.per_block ? `${measure.name} has one picture per block: it measures the block as a whole, not a head` : null;
}

// One cell's symbol: "A[11,9]", "‖α·f(x)‖[11,9]".
export function cellSymbol(measure, row, col) {
  return measure.symbol.replace("[i,j]", `[${row},${col}]`);
}

// "norm-weighted block 3, head 7": the view's name after the measure's short name, if it has one.
export function titled(measure, view) {
  return measure.short ? `${measure.short} ${view}` : view;
}
