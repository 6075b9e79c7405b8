// Wires the page: the prompt runs the model, state changes redraw the views that depend on them.

import * as api from "./api.js";
import { layerWeights, overview, queryNumbers, tokenTrace, useRun, viewMatrix } from "./data.js";
import { HEAD_COLORS, renderAttends } from "./attends.js";
import { renderDissection } from "./dissection.js";
import { saveCSV, saveImage, saveJSON } from "./export.js";
import { gridPNG, gridSVG, markCurrent, renderGrid, showShares } from "./grid.js";
import { Heatmap } from "./heatmap.js";
import { renderPipeline } from "./pipeline.js";
import { renderPooled } from "./pooled.js";
import { initPredict } from "./predict.js";
import { headsName } from "./format.js";
import { renderHeadSet } from "./headset.js";
import { filterMatrix, segmentRule, withoutSinks } from "./segments.js";
import { getState, initState, setState, subscribe } from "./state.js";
import { renderTokens, showSelection } from "./tokens.js";
import { initTour, TOUR_LENGTH } from "./tour.js";
import { LESSONS, renderLesson, renderTabs } from "./lessons/lessons.js";

const config = JSON.parse(document.getElementById("lab-config").textContent);
const model = config.model;
const $ = (id) => document.getElementById(id);

initState(
  {
    text: config.defaultText, mask: "bidirectional", pooling: "mean", layer: 0, head: 0, token: null, present: false,
    sinks: "show", pair: "", segments: "all", also: [], preview: null, heads: [...Array(model.heads).keys()], blockMean: false, allHeads: false, predict: false, tour: null, lesson: null,
  },
  { layers: model.layers, heads: model.heads, tourSteps: TOUR_LENGTH, lessons: Object.keys(LESSONS) },
);

// ---- controls -------------------------------------------------------------------------------------

function fillPickers() {
  $("layer").replaceChildren(...Array.from({ length: model.layers }, (_, layer) => new Option(`block ${layer}`, String(layer))));
  $("head").replaceChildren(
    ...Array.from({ length: model.heads }, (_, head) => new Option(`head ${head}`, String(head))),
    new Option(`all ${model.heads} heads averaged`, "mean"),
  );
}

// The prompt box is only written when the state's text changes, never over what someone is typing.
function showControls(state, changed) {
  if (changed.has("text")) $("prompt").value = state.text;
  if (changed.has("pair")) {
    $("prompt-pair").value = state.pair;
    if (state.pair) $("pair-box").open = true;
  }
  $("segments").value = state.segments;
  $("block-mean").checked = state.blockMean;
  $("mask").value = state.mask;
  $("pooling").value = state.pooling;
  $("layer").value = String(state.layer);
  $("head").value = String(state.head);
  $("sinks").value = state.sinks;
  $("all-heads").checked = state.allHeads;
  $("present").setAttribute("aria-pressed", String(state.present));
  document.body.classList.toggle("present", state.present);
}

function setBusy(busy) {
  document.body.dataset.busy = String(busy);
  $("run").disabled = busy;
  $("run").textContent = busy ? "Running…" : "Run";
}

function showError(message) {
  $("error").hidden = !message;
  $("error").textContent = message ?? "";
}

function status(message) {
  $("status").textContent = message;
}

// ---- running the model ----------------------------------------------------------------------------

let runCounter = 0;

async function runPrompt() {
  const { text, pair, mask, pooling } = getState();
  if (!text.trim()) {
    showError("Type some text first.");
    return;
  }
  const mine = ++runCounter;
  setBusy(true);
  showError(null);
  status("Running the model…");
  try {
    const run = await api.analyze({ text, textPair: pair, mask, pooling });
    if (mine !== runCounter) return;
    useRun(run.run_id);
    document.body.dataset.run = run.run_id;
    const firstContent = run.tokens.find((token) => !token.special)?.index ?? 0;
    const token = getState().token !== null && getState().token < run.tokens.length ? getState().token : firstContent;
    setState({ run, token });
    status(
      `${run.tokens.length} tokens${run.truncated ? ` — only the first ${model.max_tokens} were analyzed (the model's limit)` : ""}.`,
    );
  } catch (error) {
    if (mine !== runCounter) return;
    showError(error.message);
    status("");
  } finally {
    if (mine === runCounter) setBusy(false);
  }
}

// ---- views ----------------------------------------------------------------------------------------

const heatmap = new Heatmap($("heatmap"), (index) => setState({ token: index }));

function viewName(state) {
  const block = state.blockMean ? `all ${model.layers} blocks averaged` : `block ${state.layer}`;
  return state.head === "mean" ? `${block}, ${headsName(state.heads, model.heads)}` : `${block}, head ${state.head}`;
}

// Which heads and blocks the heatmap and the attends view average (data.viewMatrix).
function shape(state) {
  return { nHeads: model.heads, nLayers: model.layers, heads: state.heads, blockMean: state.blockMean };
}

const latest = {}; // the newest request of each view: an older answer arriving late is dropped
const drawn = {}; // the request each view last drew

function viewKey({ run, layer, head, token }) {
  return `${run.run_id}:${layer}:${head}:${token}`;
}

// view is also the element's id; once drawn, its data-view says what it shows (run:layer:head:token).
// Any change a view depends on starts a newer request, so the state at drawing time is what it shows.
async function draw(view, work) {
  const mine = (latest[view] = (latest[view] ?? 0) + 1);
  try {
    const render = await work();
    if (mine !== latest[view]) return;
    render();
    drawn[view] = mine;
    $(view).dataset.view = viewKey(getState());
  } catch (error) {
    if (mine === latest[view]) showError(error.message);
  }
}

function drawHeatmap(state) {
  const { run, layer, head } = state;
  const n = run.tokens.length;
  $("attention-shape").textContent = `${n}×${n} per head · ${model.heads} heads per block`;
  draw("heatmap", async () => {
    const { matrix, sink } = withoutSinks(await viewMatrix(layer, head, n, shape(state)), run.tokens, state.sinks);
    const shown = filterMatrix(matrix, run.tokens, segmentRule(state.segments));
    const labels = run.tokens.map((t) => t.text);
    return () => {
      const [first = null, ...others] = queries(getState());
      heatmap.draw({ matrix: shown, sink, labels, selected: first, also: others, title: `${viewName(state)} · ${run.mask} mask` });
    };
  });
}

// Selecting a token moves the heatmap's outline only: the matrix is not drawn again. A drawing still
// on its way picks the selection up when it lands.
function selectInHeatmap(state) {
  const [first = null, ...others] = queries(state);
  heatmap.select(first, others);
  if (drawn.heatmap === latest.heatmap) $("heatmap").dataset.view = viewKey(state);
}

// The query rows a view follows: the hovered token while the pointer is on a chip, else the locked
// token and any shift-clicked ones.
function queries(state) {
  if (state.preview !== null) return [state.preview];
  return state.token === null ? [] : [state.token, ...state.also.filter((index) => index !== state.token)];
}

async function attendRows(state) {
  const { run, layer, head } = state;
  const n = run.tokens.length;
  const chosen = queries(state);
  // Several queries: their rows summed, then divided by their count so the result still sums to 1.
  const rowOf = (matrix) => {
    const row = new Float32Array(n);
    for (const index of chosen) for (let key = 0; key < n; key += 1) row[key] += matrix[index * n + key];
    return row.map((sum) => sum / chosen.length);
  };
  if (state.allHeads) {
    const weights = await layerWeights(layer);
    return HEAD_COLORS.slice(0, model.heads).map((color, h) => ({ head: `head ${h}`, color, row: rowOf(weights.subarray(h * n * n)) }));
  }
  const matrix = await viewMatrix(layer, head, n, shape(state));
  const color = head === "mean" ? "#1f77b4" : HEAD_COLORS[head % HEAD_COLORS.length];
  return [{ head: head === "mean" ? "mean" : `head ${head}`, color, row: rowOf(matrix) }];
}

function drawAttends(state) {
  const { run, layer } = state;
  const chosen = queries(state);
  const token = chosen[0] ?? null;
  draw("attends", async () => {
    const rows = token === null ? [] : await attendRows(state);
    const who =
      chosen.length > 1
        ? `${chosen.length} tokens (${chosen.map((index) => `“${run.tokens[index].text}”`).join(", ")}), rows summed and renormalised,`
        : token === null
          ? ""
          : `“${run.tokens[token].text}” (token ${token})${state.preview !== null ? " (preview: click to lock)" : ""}`;
    const where = state.allHeads ? `block ${layer}, every head` : viewName(state);
    return () =>
      renderAttends($("attends"), {
        tokens: run.tokens,
        selected: token,
        rows,
        sinks: state.sinks,
        segments: segmentRule(state.segments),
        caption: `${who} in ${where}: line width and bar length show its weight on each token.`,
      });
  });
}

function drawDissection(state) {
  const { run, layer, head, token } = state;
  draw("dissection", async () => {
    if (token === null || head === "mean") {
      return () => renderDissection($("dissection"), { tokens: run.tokens, selected: token, head, model });
    }
    const [numbers, trace] = await Promise.all([queryNumbers(layer, head, token), tokenTrace(token)]);
    return () => renderDissection($("dissection"), { tokens: run.tokens, selected: token, layer, head, numbers, trace, model });
  });
}

function drawPipeline(state) {
  draw("pipeline", async () => {
    const trace = state.token === null ? null : await tokenTrace(state.token);
    return () => renderPipeline($("pipeline"), { tokens: state.run.tokens, selected: state.token, trace, model });
  });
}

function drawRun(state) {
  const { run } = state;
  const n = run.tokens.length;
  $("tokens-shape").textContent = `N = ${n} tokens`;
  renderTokens($("tokens"), run.tokens, state.token, {
    select: (index, add) => {
      const { token, also } = getState();
      if (add && token !== null && index !== token) {
        setState({ also: also.includes(index) ? also.filter((other) => other !== index) : [...also, index] });
      } else setState({ token: index === token ? null : index, also: [] });
    },
    preview: (index) => setState({ preview: index }),
  });
  $("grid-shape").textContent = `${model.layers} blocks × ${model.heads} heads, each ${n}×${n}`;
  draw("grid", async () => {
    const shrunk = await overview();
    return () =>
      renderGrid($("grid"), {
        overview: shrunk,
        current: state,
        onOpen: (layer, head) => {
          setState({ layer, head });
          $("heatmap").scrollIntoView({ behavior: "smooth", block: "center" });
        },
      });
  })
    .then(() => drawShares(state))
    .catch((error) => showError(error.message));
  renderPooled($("pooled"), run.pooled, model);
}

let keyboardMove = false; // a selection made with the arrow keys scrolls its chip into sight

const touches = (changed, ...keys) => keys.some((key) => changed.has(key));

subscribe((state, changed) => {
  showControls(state, changed);
  if (!state.run) return;
  if (changed.has("run")) drawRun(state);
  if (changed.has("present")) renderPooled($("pooled"), state.run.pooled, model);
  if (touches(changed, "head", "heads")) drawHeadSet(state);
  if (touches(changed, "run", "layer", "head", "heads", "blockMean", "present", "segments", "sinks")) drawHeatmap(state);
  else if (touches(changed, "token", "also", "preview")) selectInHeatmap(state);
  if (changed.has("token") && state.token !== null) heatmap.reveal(state.token);
  if (touches(changed, "token", "also")) showSelection($("tokens"), state.token, keyboardMove, state.also);
  if (touches(changed, "run", "layer", "head", "token", "also", "preview", "sinks", "allHeads", "segments", "heads", "blockMean")) drawAttends(state);
  if (touches(changed, "run", "layer", "head", "token")) drawDissection(state);
  if (touches(changed, "run", "token")) drawPipeline(state);
  if (touches(changed, "layer", "head")) markCurrent($("grid"), state.layer, state.head);
  if (changed.has("lesson")) renderTabs($("lesson-tabs"), state.lesson, openLesson);
  if (state.lesson && touches(changed, "lesson", ...LESSONS[state.lesson].follows)) drawLesson(state);
});

async function drawShares(state) {
  if (!$("grid-shares").checked) {
    for (const share of $("grid").querySelectorAll(".grid-share")) share.remove();
    return;
  }
  const stats = await api.headStats(state.run.run_id);
  if (getState().run === state.run) showShares($("grid"), stats.heads);
}

function drawHeadSet(state) {
  renderHeadSet($("head-set"), state, model.heads, (heads) => setState({ heads }));
}

// ---- experiments ------------------------------------------------------------------------------------

function openLesson(name) {
  setState({ lesson: name });
}

function drawLesson(state) {
  renderLesson($("lesson-panel"), state.lesson, {
    run: state.run,
    text: state.text,
    token: state.token,
    current: getState,
    model,
    onOpen: (layer, head) => {
      setState({ layer, head });
      $("heatmap").scrollIntoView({ behavior: "smooth", block: "center" });
    },
  });
}

// The next token after the selected one whose piece contains the query (## and case ignored).
function findToken(query) {
  const { run, token } = getState();
  const wanted = query.trim().toLowerCase();
  if (!run || !wanted) return;
  const n = run.tokens.length;
  const start = token === null ? 0 : token + 1;
  for (let step = 0; step < n; step += 1) {
    const candidate = run.tokens[(start + step) % n];
    if (candidate.text.replace(/^##/, "").toLowerCase().includes(wanted)) {
      keyboardMove = true;
      setState({ token: candidate.index });
      keyboardMove = false;
      $("token-search-status").textContent = `“${candidate.text}”, token ${candidate.index} of ${n}`;
      return;
    }
  }
  $("token-search-status").textContent = `No token contains “${query.trim()}”.`;
}

// ---- input ----------------------------------------------------------------------------------------

function exportView() {
  const state = getState();
  const n = state.run.tokens.length;
  return viewMatrix(state.layer, state.head, n, shape(state)).then((matrix) => ({
    text: state.text,
    model: model.name,
    mask: state.run.mask,
    pooling: state.run.pooled.strategy,
    layer: state.layer,
    head: state.head,
    tokens: state.run.tokens,
    matrix: Array.from({ length: n }, (_, row) => Array.from(matrix.subarray(row * n, (row + 1) * n))),
    pooled: state.run.pooled,
  }));
}

function fileName() {
  const { layer, head } = getState();
  return `attention-block${layer}-head${head}`;
}

function bindInputs() {
  $("prompt-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setState({ text: $("prompt").value, pair: $("prompt-pair").value.trim() ? $("prompt-pair").value : "", mask: $("mask").value, pooling: $("pooling").value });
    runPrompt();
  });
  for (const id of ["prompt", "prompt-pair"]) {
    $(id).addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        $("prompt-form").requestSubmit();
      }
    });
  }
  for (const id of ["mask", "pooling"]) $(id).addEventListener("change", () => $("prompt-form").requestSubmit());
  $("layer").addEventListener("change", () => setState({ layer: Number($("layer").value) }));
  $("head").addEventListener("change", () => setState({ head: $("head").value === "mean" ? "mean" : Number($("head").value) }));
  $("sinks").addEventListener("change", () => setState({ sinks: $("sinks").value }));
  $("segments").addEventListener("change", () => setState({ segments: $("segments").value }));
  $("block-mean").addEventListener("change", () => setState({ blockMean: $("block-mean").checked }));
  $("grid-shares").addEventListener("change", () => getState().run && drawShares(getState()).catch((error) => showError(error.message)));
  $("all-heads").addEventListener("change", () => setState({ allHeads: $("all-heads").checked }));
  $("present").addEventListener("click", () => setState({ present: !getState().present }));
  $("share").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(window.location.href);
      status("Link to this view copied.");
    } catch {
      status(`Share this link: ${window.location.href}`);
    }
  });
  $("export-png").addEventListener("click", async () => getState().run && saveImage(await heatmap.toPNG(), fileName(), "png"));
  $("export-svg").addEventListener("click", () => getState().run && saveImage(heatmap.toSVG(), fileName(), "svg"));
  const gridTitle = () => `Every head: “${getState().text.slice(0, 60)}” · ${getState().run.mask} mask · ${model.name}`;
  $("export-grid-png").addEventListener("click", async () => getState().run && saveImage(await gridPNG($("grid"), gridTitle()), "attention-grid", "png"));
  $("export-grid-svg").addEventListener("click", () => getState().run && saveImage(gridSVG($("grid"), gridTitle()), "attention-grid", "svg"));
  $("token-search").addEventListener("submit", (event) => {
    event.preventDefault();
    findToken($("token-query").value);
  });
  $("export-json").addEventListener("click", async () => getState().run && saveJSON(await exportView(), fileName()));
  $("export-csv").addEventListener("click", async () => getState().run && saveCSV(await exportView(), fileName()));
  document.addEventListener("keydown", (event) => {
    const typing = event.target.closest("textarea, input, select, [role=tablist]");
    const { run, token } = getState();
    if (typing || !run) return;
    if (event.key === "Escape") setState({ token: null, also: [] });
    else if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
      const step = event.key === "ArrowRight" ? 1 : -1;
      const start = token === null ? (step > 0 ? -1 : run.tokens.length) : token;
      keyboardMove = true;
      setState({ token: Math.max(0, Math.min(run.tokens.length - 1, start + step)) });
      keyboardMove = false;
      event.preventDefault();
    }
  });
}

fillPickers();
bindInputs();
showControls(getState(), new Set(["text", "pair"]));
drawHeadSet(getState());
initPredict(model);
initTour(model);
renderTabs($("lesson-tabs"), getState().lesson, openLesson);
runPrompt();
