// The page's controls: the prompt runs the model; the pickers, switches and keys change the state that the
// views follow; the exports save what the heatmap draws.

import * as api from "./api.js";
import { SCALES } from "./colors.js";
import { firstView, LONG_FROM } from "./data.js";
import { exportedView, saveCSV, saveImage, saveJSON } from "./export.js";
import { gridPNG, gridSVG, showShares } from "./grid.js";
import { renderHeadSet } from "./headset.js";
import { maskName, viewFileName, viewLayers, viewName } from "./matrix.js";
import { measureOf, noHead } from "./measures.js";
import { bindPopup } from "./popup.js";
import { blocksOf, rowsOf, switchKind } from "./seq2seq/kinds.js";
import { pairFileName, pairGridFileName, pairGridTitle, pairPNG, pairSVG } from "./seq2seq/picture.js";

const $ = (id) => document.getElementById(id);

// lab: {getState, setState, subscribe, model, numbers, showError}; heatmap: the stage's Heatmap (null for an
// encoder-decoder, whose heatmap is the page's PairMap and whose numbers are its run's, saved by the server).
export function initControls(lab, heatmap) {
  const { getState, setState, model } = lab;
  fillPickers();
  lab.subscribe((state, changed) => showControls(state, changed, lab));
  showControls(getState(), new Set(["text", "pair", "head", "target", "kind"]), lab);
  bindPrompt(lab);
  bindViewControls(lab, heatmap);
  const save = bindSaveMenu(lab);
  if (heatmap) bindExports(lab, heatmap, save);
  else bindPairExports(lab, save);
  bindKeys(lab);
  $("present").addEventListener("click", () => setState({ present: !getState().present }));
  bindPopup($("options-toggle"), $("prompt-options"));
  bindPopup($("toolbar-more-toggle"), $("toolbar-more"));
  bindPopup($("measure-help"), $("measure-about"));
  $("share").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(window.location.href);
      status("Link to this view copied.");
    } catch {
      status(`Share this link: ${window.location.href}`);
    }
  });
}

// The block and head pickers come with the page (the model's own counts); the colour scales are listed here.
function fillPickers() {
  $("scale").replaceChildren(
    ...Object.entries(SCALES).map(([name, { label }]) => Object.assign(new Option(name, name), { title: label })),
  );
}

// The prompt box is only written when the state's text changes, never over what someone is typing.
function showControls(state, changed, lab) {
  if (changed.has("text")) $("prompt").value = state.text;
  if (lab.model.kind === "encoder-decoder") showPairControls(state, changed, lab.model);
  if (changed.has("pair")) {
    $("prompt-pair").value = state.pair;
    if (state.pair) $("pair-box").open = true;
  }
  $("segments").value = state.segments;
  // Segments exist only in a sentence pair.
  $("segments-control").hidden = !state.run?.text_pair && state.segments === "all";
  $("block-mean").checked = state.blockMean;
  $("layer").disabled = state.blockMean;
  $("mask").value = state.mask;
  $("pooling").value = state.pooling;
  if ($("prompt-name")) $("prompt-name").value = state.promptName; // a model with prompts of its own
  $("layer").value = String(state.layer);
  $("head").value = String(state.head);
  $("sinks").value = state.sinks;
  showMeasure(state, lab.model);
  $("scale").value = state.scale;
  $("all-heads").checked = state.allHeads;
  $("present").setAttribute("aria-pressed", String(state.present));
  document.body.classList.toggle("present", state.present);
  if (changed.has("head") || changed.has("heads")) {
    renderHeadSet($("head-set"), state, lab.model.heads, (heads) => lab.setState({ heads }));
    showMeasure(state, lab.model);
  }
}

// An encoder-decoder's target box, its kind of attention and that kind's blocks; its exports name its run.
function showPairControls(state, changed, model) {
  if (changed.has("target")) $("prompt-target").value = state.target;
  $("kind").value = state.kind;
  if (changed.has("kind")) {
    const blocks = blocksOf(model, state.kind);
    $("layer").replaceChildren(...Array.from({ length: blocks }, (_, layer) => new Option(`block ${layer}`, String(layer))));
  }
  if (changed.has("run") && state.run) {
    $("export-pair-csv").href = api.pairExportURL(state.run.run_id, "csv");
    $("export-pair-json").href = api.pairExportURL(state.run.run_id, "json");
  }
}

function precision(measure, dtype) {
  if (dtype === "float32") return "";
  return measure === "weights" ? ` The model's own ${dtype} numbers.` : ` Computed in float32 from the model's ${dtype} numbers.`;
}

// The measure and what it is: its meaning read with the control (and, for a model in half precision, what it
// is computed in, as the API's X-Attention-Computed-In says), its line marked in "What is this?", and the
// choices it leaves without a meaning disabled, saying why (ALTI has one picture per block: no head).
function showMeasure(state, model) {
  const measure = measureOf(state.measure);
  $("measure").value = state.measure;
  $("measure-meaning").textContent = `${measure.meaning}${precision(state.measure, model.dtype)}`;
  for (const line of document.querySelectorAll(".measure-line")) line.classList.toggle("current", line.dataset.measure === state.measure);
  if (model.kind === "encoder-decoder") {
    for (const option of $("measure").options) {
      const why = model.not_measured[option.value];
      option.disabled = Boolean(why);
      option.title = why ? `Not computed for an encoder-decoder: ${why}` : measureOf(option.value).meaning;
    }
  }
  const why = noHead(measure) ?? "";
  for (const id of ["head", "all-heads"]) {
    const label = $(id).closest("label");
    label.dataset.title ??= label.title; // its own title, when the measure gives no reason
    $(id).disabled = measure.per_block;
    label.title = why || label.dataset.title;
  }
  $("head-set").classList.toggle("disabled", measure.per_block);
  $("head-set").title = why;
  for (const toggle of $("head-set").querySelectorAll("button")) toggle.disabled = measure.per_block;
}

// "Options…" and "More…" (presentation mode), and "What is this?" beside the measure: a group opened under
// its toggle; Esc or a click elsewhere closes it.
function setBusy(busy) {
  document.body.dataset.busy = String(busy);
  $("run").disabled = busy;
  $("run").textContent = busy ? "Running…" : "Run";
}

export function showError(message) {
  $("error").hidden = !message;
  $("error").textContent = message ?? "";
}

function status(message) {
  $("status").textContent = message;
  $("status").title = message;
}

function notice(message) {
  $("notice").hidden = !message;
  $("notice").textContent = message;
}

// Where a long input was cut: each text's last token read and the character it ends at (the analyze
// answer's offsets count code points, as [...text] does), for the texts that lost their end.
function cutNotice(run, texts, model) {
  const whose = model.max_input_tokens < model.max_tokens ? "this lab's limit" : "the model's limit";
  const places = [
    ["A", texts.text, run.text_pair ? "Sentence A" : "The text"],
    ["B", texts.pair, "sentence B"],
  ].flatMap(([segment, text, name]) => {
    const read = run.tokens.filter((token) => token.segment === segment && !token.added);
    const last = read.at(-1);
    const length = [...text.trimEnd()].length;
    if (!last || last.end >= length) return [];
    return [`${name} stops after “${last.label}” (token ${last.index}), at character ${last.end.toLocaleString("en")} of ${length.toLocaleString("en")}`];
  });
  return `Cut to the first ${run.tokens.length} tokens (${whose}).${places.length ? ` ${places.join("; ")}.` : ""}`;
}

const SITE_WORDS = {
  resid_pre: "the residual stream block {layer} reads",
  attention_output: "block {layer}'s attention output",
  head: "block {layer}, head {head}'s output",
  ffn_output: "block {layer}'s FFN output",
};

// What a patched run is, in words: every view below shows this run, not A's own.
export function patchNotice(run) {
  const { patch } = run;
  const site = SITE_WORDS[patch.site].replace("{layer}", patch.layer).replace("{head}", patch.head);
  const where = patch.positions.length === run.tokens.length ? "every position" : patch.positions.map((p) => `“${run.tokens[p].label}” (${p})`).join(", ");
  return `Patched run: ${site} at ${where} is taken from “${patch.source}”. Run the text again to see it unpatched.`;
}

let runCounter = 0;

// One run at a time: the page busy and the status saying so while `work` asks for it; `work` returns what shows
// the run once it came, done only if no newer run was asked for meanwhile (else the newer one shows), and an error
// is shown by the latest run alone.
async function latestRun(working, work) {
  const mine = ++runCounter;
  setBusy(true);
  showError(null);
  status(working);
  try {
    const show = await work();
    if (mine !== runCounter) return;
    show();
    status("");
  } catch (error) {
    if (mine !== runCounter) return;
    showError(error.message);
    status("");
  } finally {
    if (mine === runCounter) setBusy(false);
  }
}

export async function runPrompt(lab) {
  const { text, pair, mask, pooling, promptName, patch } = lab.getState();
  if (!text.trim()) {
    showError("Type some text first.");
    return;
  }
  if (lab.model.kind === "encoder-decoder") return runPair(lab);
  return latestRun("Running the model…", async () => {
    const first = firstView(lab.getState(), lab.model.layers);
    const { attention, ...run } = await api.analyze({ text, textPair: pair, mask, pooling, prompt: promptName, attention: first?.options, patch });
    first?.keep(run.run_id, attention);
    return () => {
      document.body.dataset.run = run.run_id;
      const firstContent = run.tokens.find((token) => !token.special)?.index ?? 0;
      const { token } = lab.getState();
      lab.setState({ run, token: token !== null && token < run.tokens.length ? token : firstContent });
      notice(run.truncated ? cutNotice(run, { text, pair }, lab.model) : run.patch ? patchNotice(run) : "");
    };
  });
}

// An encoder-decoder's run: the source (the prompt) and the target (written by the model when the box is empty).
// The selected row stays where the new run has it.
async function runPair(lab) {
  const { text, target, kind, token } = lab.getState();
  return latestRun(target ? "Running the model…" : "The model writes the target…", async () => {
    const run = await api.analyzePair({ source: text, target });
    return () => {
      document.body.dataset.run = run.run_id;
      const rows = rowsOf(run, kind).length;
      lab.setState({ run, token: token !== null && token < rows ? token : 0 });
      notice(run.source.truncated ? `The source was cut to its first ${run.source.tokens.length} tokens (${lab.model.max_input_tokens} at most).` : "");
    };
  });
}

function bindPrompt(lab) {
  $("prompt-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const promptName = $("prompt-name")?.value ?? lab.getState().promptName;
    const target = $("prompt-target")?.value ?? "";
    lab.setState({ text: $("prompt").value, target, pair: $("prompt-pair").value.trim() ? $("prompt-pair").value : "", mask: $("mask").value, pooling: $("pooling").value, promptName, patch: null });
    runPrompt(lab);
  });
  for (const id of ["prompt", "prompt-pair", "prompt-target"]) {
    $(id)?.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        $("prompt-form").requestSubmit();
      }
    });
  }
  for (const id of ["mask", "pooling", "prompt-name"]) $(id)?.addEventListener("change", () => $("prompt-form").requestSubmit());
  // Another model is another page (its blocks, heads, masks and poolings): the prompt goes with it.
  $("model-picker")?.addEventListener("change", (event) => {
    const { text, classCode } = lab.getState();
    const params = new URLSearchParams({ model: event.target.value, text, ...(classCode ? { class: classCode } : {}) });
    window.location.assign(`/?${params}`);
  });
}

function bindViewControls(lab, heatmap) {
  const { getState, setState } = lab;
  $("layer").addEventListener("change", () => setState({ layer: Number($("layer").value) }));
  $("head").addEventListener("change", () => setState({ head: $("head").value === "mean" ? "mean" : Number($("head").value) }));
  $("sinks").addEventListener("change", () => setState({ sinks: $("sinks").value }));
  $("measure").addEventListener("change", () => setState({ measure: $("measure").value }));
  // Another kind reads other rows (the source's or the target's) in another stack of blocks.
  $("kind")?.addEventListener("change", () => setState(switchKind(getState(), lab.model, $("kind").value)));
  $("segments").addEventListener("change", () => setState({ segments: $("segments").value }));
  $("scale").addEventListener("change", () => setState({ scale: $("scale").value }));
  $("block-mean").addEventListener("change", () => setState({ blockMean: $("block-mean").checked }));
  $("all-heads").addEventListener("change", () => setState({ allHeads: $("all-heads").checked }));
  $("grid-shares").addEventListener("change", () => {
    if (getState().run) showShares($("grid"), getState(), lab).catch((error) => lab.showError(error.message));
  });
  $("token-search").addEventListener("submit", (event) => {
    event.preventDefault();
    findToken($("token-query").value, lab, heatmap);
  });
}

// The next token after the selected one whose piece contains the query (## and case ignored); in a long run
// the heatmap jumps to its passage.
function findToken(query, { getState, setState }, heatmap) {
  const { run, token } = getState();
  const wanted = query.trim().toLowerCase();
  if (!run || !wanted) return;
  const n = run.tokens.length;
  const start = token === null ? 0 : token + 1;
  for (let step = 0; step < n; step += 1) {
    const candidate = run.tokens[(start + step) % n];
    if (candidate.text.replace(/^##/, "").toLowerCase().includes(wanted)) {
      setState({ token: candidate.index, also: [] });
      if (heatmap.long) heatmap.jump(candidate.index);
      $("token-search-status").textContent = `“${candidate.label}”, token ${candidate.index} of ${n}`;
      return;
    }
  }
  $("token-search-status").textContent = `No token contains “${query.trim()}”.`;
}

// A long run's numbers are its window's exact cells, as the heatmap shows them (every key: no filters).
function longNumbers(heatmap, state, model, name, pooled) {
  const shown = heatmap.picture;
  if (!shown || shown.pooling) throw new Error(`This view is max-pooled: zoom in to at most ${LONG_FROM} tokens a side to save its exact numbers`);
  const [row, , col] = shown.window;
  return exportedView({ state, model, matrix: shown.values, sink: null, pooled, name, window: { row, col, size: shown.window[1] - row } });
}

// Saving what the heatmap draws: the picture as it is, the numbers from the same matrix (matrix.js).
// The Save… menu: Esc closes it wherever the focus is (before the page's own Esc clears the selection). Returns
// save(id, what): a menu item that closes the menu and saves, an error said on the page.
function bindSaveMenu(lab) {
  const menu = $("export-menu-box");
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || !menu.open) return;
    event.stopImmediatePropagation();
    const inside = menu.contains(document.activeElement);
    menu.open = false;
    if (inside) $("export-menu").focus();
  });
  return (id, save) =>
    $(id).addEventListener("click", async () => {
      if (!lab.getState().run) return;
      menu.open = false;
      try {
        await save();
      } catch (error) {
        lab.showError(error.message);
      }
    });
}

function bindExports(lab, heatmap, action) {
  const { getState, model } = lab;
  const fileName = () => viewFileName(getState(), model);
  const numbers = async () => {
    const state = getState();
    const kept = lab.numbers();
    const name = `${viewName(state, model)} · ${maskName(state.run.mask, model, viewLayers(state, model))}`;
    if (heatmap.long) return longNumbers(heatmap, { ...state, sinks: "show", segments: "all" }, model, name, await kept.pooled(state.run.pooled));
    const [{ matrix, sink }, pooled] = await Promise.all([kept.matrix(state, state.run.tokens, model.layers), kept.pooled(state.run.pooled)]);
    return exportedView({ state, model, matrix, sink, pooled, name });
  };
  action("export-png", async () => saveImage(await heatmap.toPNG(), fileName(), "png"));
  action("export-svg", async () => saveImage(heatmap.toSVG(), fileName(), "svg"));
  action("export-json", async () => saveJSON(await numbers(), fileName()));
  action("export-csv", async () => saveCSV(await numbers(), fileName()));
  const gridTitle = () => `Every head: “${getState().text.slice(0, 60)}” · ${maskName(getState().run.mask, model, viewLayers({ blockMean: true }, model))} · ${model.name}`;
  action("export-grid-png", async () => saveImage(await gridPNG($("grid"), gridTitle()), "attention-grid", "png"));
  action("export-grid-svg", async () => saveImage(gridSVG($("grid"), gridTitle()), "attention-grid", "svg"));
}

// An encoder-decoder's heatmap as PNG or SVG, named for its kind, measure, block and head (its numbers are its
// run's, saved by the server: export-pair-csv, export-pair-json); its every-head grid as grid.js draws the page's,
// titled and named for its kind.
function bindPairExports(lab, action) {
  const map = () => $("heatmap").pairMap;
  const name = () => pairFileName(lab.getState(), lab.model);
  action("export-pair-png", async () => saveImage(await pairPNG(map(), lab.getState().run), name(), "png"));
  action("export-pair-svg", async () => saveImage(pairSVG(map(), lab.getState().run), name(), "svg"));
  const grid = (draw, extension) => async () => saveImage(await draw($("grid"), pairGridTitle(lab.getState())), pairGridFileName(lab.getState()), extension);
  action("export-grid-png", grid(gridPNG, "png"));
  action("export-grid-svg", grid(gridSVG, "svg"));
}

// Keys on the page itself: ← → move the selected token, Esc clears it. Text fields, pickers, tab lists and
// the heatmap's own cursor keep their keys.
// An encoder-decoder's keys move along the rows of its kind of attention (the source's or the target's).
function bindKeys({ getState, setState }) {
  document.addEventListener("keydown", (event) => {
    const own = event.target.closest("textarea, input, select, [role=tablist], .hm-plot, .menu");
    const { run, token, kind } = getState();
    if (own || !run) return;
    const n = run.tokens ? run.tokens.length : rowsOf(run, kind).length;
    if (event.key === "Escape") setState({ token: null, also: [] });
    else if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
      const step = event.key === "ArrowRight" ? 1 : -1;
      const start = token === null ? (step > 0 ? -1 : n) : token;
      setState({ token: Math.max(0, Math.min(n - 1, start + step)), also: [] });
      event.preventDefault();
    }
  });
}
