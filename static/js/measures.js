// What a number of the lab is called, declared once per measure (app/engine/measures.py, MEASURES) and sent in
// the page's config: every label, readout, title, aria-label, hint, verdict, tooltip, colour bar and export
// reads it from here, so a value above 1 is never called an attention weight.
//   key       the API's measure= ("difference" for one measure of two runs subtracted)
//   symbol    a cell's value as a formula names it, "A[i,j]"; name: one value in words, "attention weight"
//   short     in a title before the view ("norm-weighted block 3, head 7"; "" for the weights)
//   values    its unit or range; meaning: one line a learner can read; per_block: one picture per block

const config = JSON.parse(document.getElementById("lab-config").textContent);

export const MEASURES = config.measures;
// The measures a view can be drawn in (the Measure control's choices), in the declaration's order.
export const VIEW_MEASURES = config.viewMeasures;

export function measureOf(key = "weights") {
  const measure = MEASURES[key];
  if (!measure) throw new Error(`no measure is declared as “${key}”`);
  return measure;
}

// One cell's symbol: "A[11,9]", "‖α·f(x)‖[11,9]".
export function cellSymbol(measure, row, col) {
  return measure.symbol.replace("[i,j]", `[${row},${col}]`);
}

// "norm-weighted block 3, head 7": the view's name after the measure's short name, if it has one.
export function titled(measure, view) {
  return measure.short ? `${measure.short} ${view}` : view;
}
