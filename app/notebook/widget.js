// The lab in a notebook: the page's own view modules (static/js), drawn in this widget's shadow root, with
// their numbers from the kernel (app/notebook/widget.py).
//
// Why this way: anywidget loads one ES module, and the page's views are many modules that import each other
// relatively ("./matrix.js"). A copy of them bundled here would be a second implementation to keep equal to
// the page's. So the kernel sends the page's modules as they are, in dependency order (_modules), and each
// becomes a blob: URL whose relative imports are pointed at the blob URLs of the modules made before it. Every
// widget so gets its own copy of the modules: its own run caches (data.js), its own transport to its own kernel
// (api.js sendWith) and its own root (root.js drawIn), a shadow root that keeps the page's stylesheet and
// element ids to this widget and the notebook's styles out of it.

const MODULE_BASE = "https://page.invalid/js/"; // resolves a relative import to a module's name; never fetched
const IMPORT = /^(import [^;]*? from ")(\.{1,2}\/[^"]+)(")/gm;
// Traitlet → the page's state key, where the names differ (the page's link says layer, its picker Block).
const STATE_KEY = { block: "layer", block_mean: "blockMean", all_heads: "allHeads", prompt: "promptName" };
const TRAITS = ["text", "pair", "mask", "pooling", "prompt", "block", "head", "heads", "block_mean", "token", "also", "measure", "sinks", "segments", "scale", "all_heads", "panel", "target", "kind"];
const PANELS = { dissection: "Worked example", grid: "Every head", write: "Write" };

// name → blob: URL of each module, made in the order given (a module after those it imports).
function moduleURLs(modules) {
  const urls = new Map();
  for (const [name, source] of modules) {
    const linked = source.replace(IMPORT, (_, before, specifier, after) => {
      const target = new URL(specifier, MODULE_BASE + name).href.slice(MODULE_BASE.length);
      if (!urls.has(target)) throw new Error(`${name} imports ${target}, which the widget was not sent before it`);
      return before + urls.get(target) + after;
    });
    urls.set(name, URL.createObjectURL(new Blob([linked], { type: "text/javascript" })));
  }
  return urls;
}

// The page's fetch, carried to the kernel and back: a request goes out as a custom message, its answer comes
// back with the status and headers the lab sent and the body as one binary buffer (the attention endpoint's
// compact bytes as they are), or for a stream (a writing's events) as a readable body fed with each part as the
// lab sends it, then its end. Aborting the request's signal leaves the stream at the lab too.
function kernelTransport(model) {
  const waiting = new Map(); // requests not answered yet, by id
  const streams = new Map(); // streamed bodies still coming, by id: their ReadableStream controllers
  const prefix = Math.random().toString(36).slice(2); // this view's requests, apart from another view's
  let count = 0;
  // A buffer as the front end gives it (a DataView in JupyterLab, over part of a larger buffer), as bytes.
  const bytesOf = (buffer) => (ArrayBuffer.isView(buffer) ? new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength) : new Uint8Array(buffer));
  const abortError = () => new DOMException("The view left the request", "AbortError");
  const answered = (message, buffers) => {
    if (message.kind === "part") return streams.get(message.id)?.enqueue(bytesOf(buffers[0]));
    if (message.kind === "end") {
      const controller = streams.get(message.id);
      streams.delete(message.id);
      if (message.error) controller?.error(new Error(message.error));
      else controller?.close();
      return;
    }
    const pending = message.kind === "answer" && waiting.get(message.id);
    if (!pending) return;
    waiting.delete(message.id);
    if (message.error) return pending.reject(new Error(message.error));
    let body = buffers?.[0] ?? null;
    if (message.streamed) body = new ReadableStream({ start: (controller) => streams.set(message.id, controller) });
    pending.resolve(new Response(body, { status: message.status, headers: message.headers }));
  };
  model.on("msg:custom", answered);
  const send = (url, options = {}) =>
    new Promise((resolve, reject) => {
      const id = `${prefix}:${(count += 1)}`;
      waiting.set(id, { resolve, reject });
      options.signal?.addEventListener("abort", () => {
        model.send({ kind: "abort", id });
        waiting.get(id)?.reject(abortError());
        waiting.delete(id);
        streams.get(id)?.error(abortError());
        streams.delete(id);
      });
      model.send({ kind: "fetch", id, url, method: options.method ?? "GET", body: options.body ?? null });
    });
  return { send, close: () => model.off("msg:custom", answered) };
}

// The page's state as the views read it, kept equal to the traitlets: a view's change (a click) goes to the
// kernel, a traitlet's change (from Python) to the views, all the traitlets of one change at once.
function createStore(model, initial) {
  let state = initial;
  const listeners = new Set();
  const same = (a, b) => a === b || (Array.isArray(a) && Array.isArray(b) && a.join() === b.join());
  const store = {
    get: () => state,
    set(patch, fromKernel = false) {
      const changed = Object.keys(patch).filter((key) => !same(state[key], patch[key]));
      if (changed.length === 0) return;
      state = { ...state, ...patch };
      if (!fromKernel) {
        for (const trait of TRAITS) if (changed.includes(STATE_KEY[trait] ?? trait)) model.set(trait, state[STATE_KEY[trait] ?? trait]);
        model.save_changes();
      }
      for (const listener of listeners) listener(state, new Set(changed));
    },
    subscribe: (listener) => listeners.add(listener),
  };
  return store;
}

function traitState(model) {
  return Object.fromEntries(TRAITS.map((trait) => [STATE_KEY[trait] ?? trait, model.get(trait)]));
}

// The frame the views draw into: the page's element ids and classes (lab.css lays them out), a bar of the
// view's pickers above, and the panels under the views at the output's whole width: beside them, a notebook's
// side column is too narrow for the page's type (every head's twelve head numbers, its switch), and a
// notebook scrolls down.
function frame(el) {
  const node = (tag, attributes = {}, ...children) => {
    const made = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) made.setAttribute(name, value);
    made.append(...children);
    return made;
  };
  const heatmapColumn = node(
    "section",
    { class: "heatmap-column" },
    node("h2", { class: "visually-hidden" }, node("span", { id: "attention-name" }), " ", node("span", { class: "shape", id: "attention-shape" })),
    node("div", { class: "heatmap-box" }, node("div", { id: "heatmap", class: "heatmap", role: "group", "aria-label": "Attention heatmap: rows are query tokens, columns are key tokens" })),
    node("p", { id: "heatmap-readout", class: "readout", role: "status", "aria-live": "polite" }),
  );
  const gridPanel = node(
    "div",
    { class: "panel", id: "panel-grid", role: "tabpanel", hidden: "" },
    node("span", { class: "shape", id: "grid-shape" }),
    node("label", { class: "check" }, node("input", { type: "checkbox", id: "grid-shares" }), " share on ", node("span", { id: "grid-shares-names" }), " (S) and on “.”"),
    node("p", { class: "hint", id: "grid-hint" }),
    node("div", { id: "grid", class: "grid" }),
  );
  const side = node(
    "div",
    { class: "side" },
    node("section", { class: "attends-panel" }, node("h2", {}, "What does the selected token attend to?"), node("div", { id: "attends", class: "attends", tabindex: "0", role: "region" })),
  );
  const panels = node(
    "section",
    { class: "panels open" },
    node("div", { class: "panel-bar" }, node("div", { class: "panel-tabs", role: "tablist", id: "panel-tabs" })),
    node(
      "div",
      { class: "panel-body" },
      node("div", { class: "panel", id: "panel-dissection", role: "tabpanel" }, node("div", { id: "dissection", class: "dissection" })),
      gridPanel,
      node("div", { class: "panel", id: "panel-write", role: "tabpanel", hidden: "" }, node("div", { id: "write", class: "write" })),
    ),
  );
  el.append(
    node(
      "div",
      { class: "lab-widget type-floor" },
      node("div", { class: "toolbar widget-bar", id: "widget-bar", role: "group", "aria-label": "What the attention views show" }),
      node("p", { id: "error", class: "error", role: "alert", hidden: "" }),
      node(
        "section",
        { class: "tokens-bar" },
        node("div", { class: "bar-head" }, node("h2", {}, "Tokens ", node("span", { class: "shape", id: "tokens-shape" })), node("span", { id: "tokens-page", class: "tokens-page", hidden: "" })),
        node("div", { id: "tokens", class: "token-strip", role: "listbox", "aria-label": "Tokens", tabindex: "0" }),
      ),
      node("div", { class: "views", id: "views" }, heatmapColumn, side),
      panels,
    ),
  );
}

// The pickers of the page's toolbar that a notebook needs: block, head (or the mean of a head set), the
// measure (its choices and words from the measures' one declaration, measures.js), the special tokens, and
// the two panels' tabs.
function controls(root, lab, { el }, { MEASURES, VIEW_MEASURES, measureOf, noHead }, { renderHeadSet }) {
  const { model } = lab;
  const picker = (label, key, options, parse = (value) => value) => {
    const select = el("select", { dataset: { key } }, ...options.map(([value, name, disabled]) => Object.assign(new Option(name, String(value)), { disabled: Boolean(disabled) })));
    select.addEventListener("change", () => lab.setState({ [key]: parse(select.value) }));
    return { select, label: el("label", {}, `${label} `, select) };
  };
  const blocks = picker("Block", "layer", [...Array(model.layers).keys()].map((layer) => [layer, `block ${layer}`]), Number);
  const heads = picker("Head", "head", [...[...Array(model.heads).keys()].map((head) => [head, `head ${head}`]), ["mean", `mean of ${model.heads} heads`]], (value) => (value === "mean" ? "mean" : Number(value)));
  // A model without an adapter has its weights only: the other measures are listed, not offered (as on the page).
  const measures = picker("Measure", "measure", VIEW_MEASURES.map((key) => [key, MEASURES[key].name, key !== "weights" && !model.capabilities.measures]));
  const sinks = picker("Special tokens", "sinks", [["show", "show"], ["hide", "hide"], ["renormalise", "hide + renormalise"]]);
  const headSet = el("div", { class: "head-set", role: "group", "aria-label": "Heads in the mean", hidden: "" });
  const tabs = Object.entries(PANELS).map(([panel, name]) => {
    const tab = el("button", { type: "button", role: "tab", id: `panel-tab-${panel}`, dataset: { panel } }, name);
    tab.addEventListener("click", () => lab.setState({ panel: lab.getState().panel === panel ? null : panel }));
    return tab;
  });
  root.getElementById("panel-tabs").replaceChildren(...tabs);
  const meaning = el("span", { class: "hint widget-meaning" });
  root.getElementById("widget-bar").replaceChildren(blocks.label, heads.label, measures.label, sinks.label, meaning, headSet);
  const show = (state) => {
    blocks.select.value = String(state.layer);
    blocks.select.disabled = state.blockMean;
    heads.select.value = String(state.head);
    measures.select.value = state.measure;
    sinks.select.value = state.sinks;
    const measure = measureOf(state.measure);
    meaning.textContent = measure.meaning;
    heads.select.disabled = measure.per_block;
    heads.select.title = noHead(measure) ?? "";
    renderHeadSet(headSet, state, model.heads, (chosen) => lab.setState({ heads: chosen }));
    root.querySelector(".panels").classList.toggle("open", state.panel !== null);
    for (const tab of tabs) tab.setAttribute("aria-selected", String(tab.dataset.panel === state.panel));
    for (const panel of Object.keys(PANELS)) root.getElementById(`panel-${panel}`).hidden = panel !== state.panel;
  };
  lab.subscribe((state) => show(state));
  show(lab.getState());
}

// An encoder-decoder's pickers (the page's seq2seq controls): which kind of attention, that kind's own blocks, a
// head (or the mean of a head set), the measures its run holds; its one panel, every head of the kind.
function pairControls(root, lab, { el }, { MEASURES, VIEW_MEASURES, measureOf }, { renderHeadSet }, { KINDS, blocksOf, rowsOf }) {
  const { model } = lab;
  const picker = (label, options, change) => {
    const select = el("select", {}, ...options.map(([value, name, disabled]) => Object.assign(new Option(name, String(value)), { disabled: Boolean(disabled), title: disabled || "" })));
    select.addEventListener("change", () => change(select.value));
    return { select, label: el("label", {}, `${label} `, select) };
  };
  const kinds = picker(
    "Attention",
    Object.entries(KINDS).map(([kind, { rows, columns }]) => [kind, `${kind}: ${rows} → ${columns}`]),
    (next) => {
      // The kind's own stack and rows: the block and token kept where they fit (as the page's picker keeps them).
      const { layer, token, kind, run } = lab.getState();
      const sameRows = KINDS[kind].rows === KINDS[next].rows;
      lab.setState({ kind: next, layer: Math.min(layer, blocksOf(model, next) - 1), token: sameRows || !run ? token : Math.min(token ?? 0, rowsOf(run, next).length - 1) });
    },
  );
  const blocks = picker("Block", [], (value) => lab.setState({ layer: Number(value) }));
  const heads = picker("Head", [...[...Array(model.heads).keys()].map((head) => [head, `head ${head}`]), ["mean", `mean of ${model.heads} heads`]], (value) => lab.setState({ head: value === "mean" ? "mean" : Number(value) }));
  const measures = picker(
    "Measure",
    // The measures its run holds; the others listed, not offered, with why (as on the page).
    VIEW_MEASURES.map((key) => [key, MEASURES[key].name, ["weights", "norm"].includes(key) ? "" : `Not computed for an encoder-decoder: ${model.not_measured[key] ?? "the lab computes the weights and the norm-weighted attention"}`]),
    (value) => lab.setState({ measure: value }),
  );
  const headSet = el("div", { class: "head-set", role: "group", "aria-label": "Heads in the mean", hidden: "" });
  const tab = el("button", { type: "button", role: "tab", id: "panel-tab-grid", dataset: { panel: "grid" } }, PANELS.grid);
  tab.addEventListener("click", () => lab.setState({ panel: lab.getState().panel === "grid" ? null : "grid" }));
  root.getElementById("panel-tabs").replaceChildren(tab);
  const meaning = el("span", { class: "hint widget-meaning" });
  root.getElementById("widget-bar").replaceChildren(kinds.label, blocks.label, heads.label, measures.label, meaning, headSet);
  const show = (state) => {
    kinds.select.value = state.kind;
    const count = blocksOf(model, state.kind);
    if (blocks.select.options.length !== count) blocks.select.replaceChildren(...Array.from({ length: count }, (_, layer) => new Option(`block ${layer}`, String(layer))));
    blocks.select.value = String(state.layer);
    heads.select.value = String(state.head);
    measures.select.value = state.measure;
    meaning.textContent = measureOf(state.measure).meaning;
    renderHeadSet(headSet, state, model.heads, (chosen) => lab.setState({ heads: chosen }));
    root.querySelector(".panels").classList.toggle("open", state.panel === "grid");
    tab.setAttribute("aria-selected", String(state.panel === "grid"));
    for (const panel of Object.keys(PANELS)) root.getElementById(`panel-${panel}`).hidden = panel !== "grid" || state.panel !== "grid";
  };
  lab.subscribe((state) => show(state));
  show(lab.getState());
}

async function render({ model, el }) {
  const root = el.attachShadow({ mode: "open" });
  const config = model.get("config");
  const style = document.createElement("style");
  // The page's stylesheet sets its variables on :root, which a shadow root has not: here they are the host's.
  style.textContent = model.get("_styles").replaceAll(":root", ":host");
  const labConfig = Object.assign(document.createElement("script"), { type: "application/json", id: "lab-config", textContent: JSON.stringify(config) });
  root.append(style, labConfig);
  frame(root);
  const urls = moduleURLs(model.get("_modules"));
  const load = (name) => import(urls.get(name));
  (await load("root.js")).drawIn(root); // before any view module reads an element (measures.js reads lab-config)
  const names = ["api.js", "data.js", "measures.js", "format.js", "views.js", "tokens.js", "attention.js", "attends.js", "grid.js", "dissection.js", "headset.js", "write.js", "seq2seq/views.js", "seq2seq/kinds.js"];
  const [api, data, measures, format, views, tokens, attention, attends, grid, dissection, headset, write, pair, kinds] = await Promise.all(names.map(load));
  for (const url of urls.values()) URL.revokeObjectURL(url); // every module is loaded: the URLs are no longer needed
  const transport = kernelTransport(model);
  api.sendWith(transport.send);

  const store = createStore(model, { ...traitState(model), run: null, preview: null, question: null, present: false, guesses: new Map() });
  const errorLine = root.getElementById("error");
  const showError = (message) => {
    errorLine.hidden = !message;
    errorLine.textContent = message ?? "";
  };
  // A written sequence read in the views: its text set, which the kernel runs (LabWidget's text traitlet).
  const readText = (text, token) => store.set({ text, token });
  const lab = { getState: store.get, setState: (patch) => store.set(patch), subscribe: store.subscribe, model: config.model, numbers: () => data.numbersOf(store.get().run.run_id), showError, readText };
  // An encoder-decoder's run is a source, a target and three kinds of attention: the page's views of it (seq2seq/).
  const pairRun = config.model.kind === "encoder-decoder";
  if (pairRun) {
    views.mountViews([pair.pairTokensView, pair.createPairMapView(lab, attention.stageBounds), pair.pairAttendsView, pair.pairGridView], lab);
    pairControls(root, lab, format, measures, headset, kinds);
  } else {
    const heatmap = attention.createAttentionView(lab);
    views.mountViews([tokens.tokensView, heatmap, attends.attendsView, dissection.dissectionView, grid.gridView], lab);
    controls(root, lab, format, measures, headset);
    write.initWrite(lab); // a decoder writes here as on the page: the kernel relays its stream as it comes
  }
  root.getElementById("grid-shares").addEventListener("change", () => {
    if (store.get().run) grid.showShares(root.getElementById("grid"), store.get(), lab).catch((error) => showError(error.message));
  });

  // A run from the kernel: its first view's matrix is kept as the page keeps the analyze answer's (data.js).
  const fromKernel = () => {
    const run = model.get("run");
    const patch = traitState(model);
    if (run.run_id && run.run_id !== store.get().run?.run_id) {
      const view = model.get("first_view");
      if (view.measure) data.firstView({ ...patch, ...view, blockMean: false }, config.model.layers)?.keep(run.run_id, run.attention);
      const { attention: _, ...kept } = run;
      patch.run = pairRun ? run : kept; // an encoder-decoder's views draw from its run's whole attention
    }
    store.set(patch, true);
    showError(model.get("error"));
  };
  let queued = false;
  const changed = () => {
    if (queued) return;
    queued = true;
    queueMicrotask(() => {
      queued = false;
      fromKernel(); // every traitlet of one message has arrived by now: one change of the state
    });
  };
  for (const trait of ["run", "error", ...TRAITS]) model.on(`change:${trait}`, changed);
  fromKernel();
  return () => {
    transport.close();
    for (const trait of ["run", "error", ...TRAITS]) model.off(`change:${trait}`, changed);
  };
}

export default { render };
