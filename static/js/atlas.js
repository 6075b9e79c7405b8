// The head atlas page: a corpus run (POST /api/atlas, then GET it while its progress is polled), every
// head as a grid and as a scatter of two scores coloured by a third, and a clicked head's corpus label and
// top examples, each a link opening the lab at that block, head and token.
// Shapes: scores[name] is [layer][head]; examples is [layer][head][example].

import * as api from "./api.js";
import { ATLAS_KEY } from "./atlas-key.js";
import { loadPlotly } from "./plotly.js";

// The scores' page names and those a corpus label can name, as the engine declares them (app/engine/atlas.py).
const { scores: SCORES, labelled: LABELLED } = JSON.parse(document.getElementById("lab-config").textContent);

const $ = (id) => document.getElementById(id);
const status = (text) => ($("atlas-status").textContent = text);
let atlas = null;
let running = null; // the AbortController of the request computing an atlas

function names() {
  return Object.keys(SCORES).filter((name) => name in atlas.scores);
}

function fillSelect(select, chosen) {
  select.replaceChildren(...names().map((name) => new Option(SCORES[name], name, false, name === chosen)));
}

async function run() {
  const text = $("atlas-sentences").value;
  const body = {};
  if (text.trim()) body.sentences = text;
  const ablation = $("atlas-ablation").value; // empty: the lab's default
  if (ablation !== "") body.ablation_sentences = Number(ablation);
  let id;
  try {
    ({ atlas_id: id } = await api.startAtlas(body));
  } catch (error) {
    return status(`Not run: ${error.message}`);
  }
  history.replaceState(null, "", `?id=${id}`);
  await open(id);
}

async function open(id) {
  running = new AbortController();
  $("atlas-run").disabled = true;
  $("atlas-cancel").disabled = false;
  const bar = $("atlas-progress");
  bar.hidden = false;
  bar.value = 0;
  status("Running the corpus…");
  const onProgress = (done, total) => {
    bar.value = done / total;
    status(`Running the corpus: pass ${done} of ${total}`);
  };
  try {
    atlas = await api.longJob(api.atlasUrl(id), { signal: running.signal, onProgress });
    localStorage.setItem(ATLAS_KEY, JSON.stringify({ id, model: atlas.model }));
    status(
      `${atlas.sentences} sentences, ${atlas.tokens} tokens (${atlas.cut} cut at ${atlas.max_tokens}), ` +
        `${atlas.repeats} repeated sequences of ${atlas.repeat_length} tokens, ablation on ${atlas.ablation_sentences} sentences, ${atlas.mask} mask`,
    );
    await draw();
  } catch (error) {
    status(error.name === "AbortError" ? "Cancelled: the lab stops the run at its next pass." : `Not run: ${error.message}`);
  } finally {
    bar.hidden = true;
    $("atlas-run").disabled = false;
    $("atlas-cancel").disabled = true;
    running = null;
  }
}

function heads() {
  const found = [];
  for (let layer = 0; layer < atlas.layers; layer++) for (let head = 0; head < atlas.heads; head++) found.push([layer, head]);
  return found;
}

const value = (name, [layer, head]) => atlas.scores[name][layer][head];

async function draw() {
  $("atlas-views").hidden = false;
  for (const [id, chosen] of [
    ["atlas-grid-score", "previous"],
    ["atlas-x", "previous"],
    ["atlas-y", "sink"],
    ["atlas-colour", "ablation" in atlas.scores ? "ablation" : "entropy"],
  ])
    fillSelect($(id), $(id).value || chosen);
  await Promise.all([drawGrid(), drawScatter()]);
}

async function drawGrid() {
  const Plotly = await loadPlotly();
  const name = $("atlas-grid-score").value;
  const range = (n) => Array.from({ length: n }, (_, i) => i);
  const plot = $("atlas-grid");
  await Plotly.react(
    plot,
    [
      {
        type: "heatmap",
        z: atlas.scores[name],
        x: range(atlas.heads),
        y: range(atlas.layers),
        colorscale: "Viridis",
        colorbar: { title: { text: SCORES[name], side: "right" } },
        hovertemplate: `block %{y}, head %{x}<br>${SCORES[name]} %{z:.4f}<extra></extra>`,
      },
    ],
    {
      title: { text: `Every head: ${SCORES[name]}` },
      xaxis: { title: { text: "head" }, tickvals: range(atlas.heads), ticktext: range(atlas.heads).map(String) },
      yaxis: { title: { text: "block" }, tickvals: range(atlas.layers), ticktext: range(atlas.layers).map(String), autorange: "reversed" },
      margin: { l: 60, r: 20, t: 40, b: 50 },
    },
    { responsive: true, displaylogo: false },
  );
  plot.removeAllListeners?.("plotly_click");
  plot.on("plotly_click", (event) => showHead(event.points[0].y, event.points[0].x));
}

async function drawScatter() {
  const Plotly = await loadPlotly();
  const [x, y, colour] = ["atlas-x", "atlas-y", "atlas-colour"].map((id) => $(id).value);
  const all = heads();
  const plot = $("atlas-scatter");
  await Plotly.react(
    plot,
    [
      {
        type: "scatter",
        mode: "markers",
        x: all.map((head) => value(x, head)),
        y: all.map((head) => value(y, head)),
        customdata: all,
        marker: {
          size: 10,
          color: all.map((head) => value(colour, head)),
          colorscale: "Viridis",
          colorbar: { title: { text: SCORES[colour], side: "right" } },
          line: { width: 1, color: "#333" },
        },
        hovertemplate:
          `block %{customdata[0]}, head %{customdata[1]}<br>${SCORES[x]} %{x:.4f}<br>${SCORES[y]} %{y:.4f}` +
          `<br>${SCORES[colour]} %{marker.color:.4f}<extra></extra>`,
      },
    ],
    {
      title: { text: `${SCORES[y]} against ${SCORES[x]}` },
      xaxis: { title: { text: SCORES[x] } },
      yaxis: { title: { text: SCORES[y] } },
      margin: { l: 60, r: 20, t: 40, b: 50 },
    },
    { responsive: true, displaylogo: false },
  );
  plot.removeAllListeners?.("plotly_click");
  plot.on("plotly_click", (event) => showHead(...event.points[0].customdata));
}

function link(example, layer, head) {
  const params = new URLSearchParams({
    text: example.text,
    layer: String(layer),
    head: String(head),
    token: String(example.query),
  });
  return `/?${params}`;
}

function showHead(layer, head) {
  const label = atlas.labels[layer][head];
  const strongest = LABELLED.reduce((a, b) => (value(a, [layer, head]) >= value(b, [layer, head]) ? a : b));
  const title = document.createElement("h2");
  title.textContent = `Block ${layer}, head ${head}`;
  const verdict = document.createElement("p");
  verdict.className = "atlas-label";
  verdict.textContent = label
    ? `Over the corpus: ${label.label} (${SCORES[label.score]} ${label.value.toFixed(4)})`
    : `Over the corpus: no single role (strongest: ${SCORES[strongest]} ${value(strongest, [layer, head]).toFixed(4)}, below ${atlas.threshold})`;
  const scores = document.createElement("dl");
  for (const name of names()) {
    const term = document.createElement("dt");
    term.textContent = SCORES[name];
    const detail = document.createElement("dd");
    detail.textContent = value(name, [layer, head]).toFixed(4) + (name === "positional" ? ` at offset ${atlas.offset[layer][head]}` : "");
    scores.append(term, detail);
  }
  const heading = document.createElement("h3");
  heading.textContent = "Top examples: its strongest weight on a word in each sentence";
  const list = document.createElement("ol");
  list.className = "atlas-examples";
  for (const example of atlas.examples[layer][head]) {
    const item = document.createElement("li");
    const anchor = document.createElement("a");
    anchor.href = link(example, layer, head);
    anchor.textContent = `“${example.query_token}” → “${example.key_token}” ${example.weight.toFixed(4)}`;
    anchor.title = "Open this sentence in the lab at this block, head and token";
    const sentence = document.createElement("span");
    sentence.className = "atlas-sentence";
    sentence.textContent = example.text;
    item.append(anchor, " ", sentence);
    list.append(item);
  }
  const colour = document.createElement("div");
  colour.className = "atlas-space-controls";
  colour.innerHTML =
    '<label>Queries and keys in <select id="atlas-space-method"><option value="pca">PCA (first 4,096 tokens)</option><option value="tsne">t-SNE (first 1,024 tokens; seconds)</option></select></label> ' +
    '<label>coloured by <select id="atlas-space-colour"><option value="kind">query or key</option><option value="position">position</option><option value="token">token (the 10 most frequent)</option></select></label> ' +
    '<span id="atlas-space-status" role="status" aria-live="polite"></span>';
  const space = Object.assign(document.createElement("div"), { id: "atlas-space", className: "atlas-plot atlas-space" });
  $("atlas-head").replaceChildren(title, verdict, scores, heading, list, colour, space);
  $("atlas-head").dataset.head = `${layer},${head}`;
  $("atlas-space-colour").addEventListener("change", () => drawSpace(layer, head));
  $("atlas-space-method").addEventListener("change", () => drawSpace(layer, head));
  drawSpace(layer, head);
}

// Shapes: query and key are [token][2], in corpus order; sentence, position and token are [token].
const spaces = new Map();
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

async function drawSpace(layer, head) {
  const method = $("atlas-space-method").value;
  const key = `${layer},${head}`;
  const asked = `${key},${method}`;
  const status = $("atlas-space-status");
  if (!spaces.has(asked)) {
    spaces.set(asked, api.atlasSpace(atlas.atlas_id, layer, head, method));
  }
  status.textContent = method === "tsne" ? "Projecting with t-SNE: a few seconds…" : "Projecting…";
  let Plotly, found;
  try {
    [Plotly, found] = await Promise.all([loadPlotly(), spaces.get(asked)]);
  } catch (error) {
    spaces.delete(asked);
    if ($("atlas-head").dataset.head === key) status.textContent = `The projection failed: ${error.message}`;
    return;
  }
  if ($("atlas-head").dataset.head !== key || $("atlas-space-method").value !== method) return;
  status.textContent = "";
  const by = $("atlas-space-colour").value;
  const inSentence = found.token.map((token, i) => {
    const words = found.token.slice(i - found.position[i], i - found.position[i] + 80).filter((_, j) => found.sentence[i - found.position[i] + j] === found.sentence[i]);
    return words.map((word, j) => (j === found.position[i] ? `[${word}]` : word)).join(" ");
  });
  const common = Object.entries(found.token.reduce((counts, token) => ({ ...counts, [token]: (counts[token] ?? 0) + 1 }), {}))
    .sort((a, b) => b[1] - a[1])
    .slice(0, 10)
    .map(([token]) => token);
  const trace = (kind, points, symbol) => ({
    type: "scatter",
    mode: "markers",
    name: kind,
    x: points.map((point) => point[0]),
    y: points.map((point) => point[1]),
    customdata: found.token.map((token, i) => [token, found.position[i], inSentence[i]]),
    hovertemplate: `${kind} of “%{customdata[0]}” (position %{customdata[1]})<br>%{customdata[2]}<extra></extra>`,
    marker: {
      size: 6,
      symbol,
      opacity: 0.75,
      ...(by === "kind" ? { color: kind === "query" ? "#1f77b4" : "#d62728" } : {}),
      ...(by === "position" ? { color: found.position, colorscale: "Viridis", colorbar: kind === "query" ? { title: { text: "position", side: "right" } } : undefined } : {}),
      ...(by === "token" ? { color: found.token.map((token) => (common.includes(token) ? PALETTE[common.indexOf(token)] : "#d0d0d0")) } : {}),
    },
  });
  // PCA's axes are components with their share of the variance; t-SNE's axes mean nothing in themselves.
  const [first, second] = found.explained.map((share) => `${(100 * share).toFixed(1)}%`);
  const axis = (n, share) => (method === "pca" ? `PC ${n} (${share}${n === 1 ? " of the variance" : ""})` : `t-SNE ${n}`);
  await Plotly.react(
    $("atlas-space"),
    [trace("query", found.query, "circle"), trace("key", found.key, "x")],
    {
      title: { text: `Block ${layer}, head ${head}: queries (●) and keys (×) in one space<br><sub>${found.method.replace("; keys", ";<br>keys")}</sub>`, font: { size: 14 } },
      xaxis: { title: { text: axis(1, first) } },
      yaxis: { title: { text: axis(2, second) } },
      margin: { l: 60, r: 20, t: 90, b: 50 },
      legend: { orientation: "h", y: -0.2 },
    },
    { responsive: true, displaylogo: false },
  );
}

$("atlas-run").addEventListener("click", run);
$("atlas-cancel").addEventListener("click", () => running?.abort());
$("atlas-grid-score").addEventListener("change", drawGrid);
for (const id of ["atlas-x", "atlas-y", "atlas-colour"]) $(id).addEventListener("change", drawScatter);
const shared = new URLSearchParams(location.search).get("id");
if (shared) open(shared);
