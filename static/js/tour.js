// The guided tour: one box that walks a class through the pipeline, step by step, with the current run's
// real shapes. Each step outlines the view that shows it, opening its panel, and the box sits where it
// covers neither the heatmap nor that view. A tour is its steps and the facts their texts read: the page's own
// here (TOUR), an encoder-decoder's in seq2seq/tour.js; the page that composes the views picks one.

import { missing } from "./capabilities.js";
import { count, fixed } from "./format.js";
import { scaledByRootD, viewLayers } from "./matrix.js";
import { PANELS } from "./panels.js";

const POOLING = {
  mean: "the average of all of them",
  cls: "the first token's vector alone",
  last: "the last token's vector alone: under the causal mask it is the only one that has read the whole text",
  max: "the largest value of each dimension over all of them",
};

// How the model learns where a token is: a table per position, plus a bias per distance, or a rotation.
const POSITIONS = {
  absolute: (m) =>
    `Attention by itself does not know word order, so a second table adds a vector for each position (up to ${m.max_tokens})${m.token_types ? "; a tiny third one adds the segment" : ""}. The shape does not change.`,
  relative: (m) =>
    `Attention by itself does not know word order, so a second table adds a vector for each position (up to ${m.max_tokens}), and every head adds a learned bias for how far apart two tokens are. The shape does not change.`,
  rotary: () =>
    "Attention by itself does not know word order. This model adds no position vector: in every block it rotates each query and key by an angle that grows with the token's position (RoPE), so their dot product depends on how far apart the two tokens are.",
};

// The Dense modules of the model's sentence-transformers pipeline, in order.
const dense = (m) => m.sentence_modules.filter((module) => module.module === "Dense");

const normName = (m) => (m.normalization === "pre-RMSNorm" ? "RMSNorm" : "LayerNorm");

// A model without an adapter has no known scale: the usual formula stands for it in the titles.
const byRootD = (m) => m.scales.includes(null) || scaledByRootD(m, viewLayers({ blockMean: true }, m));

// How the scores are scaled, in words.
function scaling(m) {
  if (byRootD(m)) return `divided by √${m.head_dim} ≈ ${fixed(Math.sqrt(m.head_dim), 2)}`;
  return `multiplied by each block's own scale (${m.scales.map((scale) => fixed(scale, 4)).join(", ")})`;
}

// The special tokens the tokenizer puts around a text, read off its pair layout ("[CLS] A [SEP] B [SEP]").
function addedAround(m) {
  const parts = m.pair_layout.split(" ");
  const first = parts[0] !== "A" ? parts[0] : null;
  const last = parts.at(-1) !== "B" ? parts.at(-1) : null;
  if (!first && !last) return ", with no special token added";
  return `, and the special ${[first && `${first} at the start`, last && `${last} at the end`].filter(Boolean).join(" and ")}`;
}

// target: the id of the element that shows the step; anchor: where in it the step's part is, when the target
// is a tall panel that scrolls (a selector; the first match); sets: the state the step shows, (state, model) →
// the fields to set on entering it. n is the run's token count ("N" before a run);
// m is the model's config (layers, heads, hidden_size, head_dim, intermediate_size, vocab_size, ...).
const STEPS = [
  {
    target: "tokens",
    title: () => "Tokens",
    text: ({ n, m }) => `The tokenizer cuts the text into ${n} pieces: words and word pieces${addedAround(m)}.`,
    shape: ({ n }) => `N = ${n} tokens`,
  },
  {
    target: "tokens",
    title: () => "Token ids",
    text: ({ m, example }) =>
      `Each piece is a number: its entry in a vocabulary of ${m.vocab_size.toLocaleString("en")}. The small number under each chip is that id${example ? `; “${example.label}” is ${example.id}` : ""}.`,
    shape: ({ n }) => `${n} ids`,
  },
  {
    target: "pipeline",
    anchor: '[data-field="word"]',
    title: () => "Embedding rows",
    text: ({ n, m }) =>
      `Each id picks one row of a learned table, so the text becomes ${n} vectors of ${m.hidden_size} numbers each: the model's first idea of what each piece means.`,
    shape: ({ n, m }) => `${m.vocab_size.toLocaleString("en")}×${m.hidden_size} table → ${n}×${m.hidden_size}`,
  },
  {
    target: "pipeline",
    anchor: '[data-field="position"], .hint',
    title: ({ m }) => (m.positions === "rotary" ? "Positions: rotation (RoPE)" : "+ position"),
    text: ({ m }) => POSITIONS[m.positions](m),
    shape: ({ n, m }) => `${n}×${m.hidden_size} + ${n}×${m.hidden_size} → ${n}×${m.hidden_size}`,
  },
  {
    target: "pipeline",
    anchor: '[data-field="normalized"], .blocks',
    title: ({ m }) => (m.normalization === "post-LN" ? "LayerNorm" : `${normName(m)} before each part`),
    text: ({ m }) =>
      m.normalization === "post-LN"
        ? `Each token's ${m.hidden_size} numbers are shifted to mean 0 and scaled to spread 1, then stretched by learned weights. This is what block 0 reads.`
        : `Each block reads a normalised copy of the residual stream (${normName(m)}: ${m.normalization === "pre-RMSNorm" ? "scaled to root-mean-square 1, not shifted" : "shifted to mean 0 and scaled to spread 1"}, then stretched by learned weights) before attention, and again before the FFN; the stream itself is only added to.`,
    shape: ({ n, m }) => `${n}×${m.hidden_size}`,
  },
  {
    target: "dissection",
    anchor: ".step",
    title: () => "Queries, keys, values",
    text: ({ n, m }) =>
      `Three learned ${m.hidden_size}×${m.hidden_size} matrices turn every token into a query (what it looks for), a key (what it offers) and a value (what it passes on). Each is cut into ${count(m.heads, "head")} of ${m.head_dim} numbers: ${n}×${m.head_dim} per head.`,
    shape: ({ n, m }) => `Q, K, V: ${n}×${m.hidden_size} each = ${count(m.heads, "head")} × ${n}×${m.head_dim}`,
  },
  {
    target: "dissection",
    anchor: ".step:nth-of-type(3)",
    title: ({ m }) => (byRootD(m) ? "Scores: QKᵀ/√d" : "Scores: QKᵀ × each block's scale"),
    text: ({ m }) =>
      `In each head every query meets every key: their dot product, ${scaling(m)} so the numbers stay moderate, says how well they match. The worked example works one out with the real numbers.${m.score_notes.length ? ` In this model: ${m.score_notes.join(" ")}` : ""}`,
    shape: ({ n, m }) => `${n}×${m.head_dim} · ${m.head_dim}×${n} → ${count(m.heads, "head")} × ${n}×${n}`,
  },
  {
    target: "heatmap",
    title: () => "Softmax",
    text: ({ n }) =>
      `Each row of scores becomes weights that are positive and add up to 1: how much that token attends to each token. The heatmap is one head's ${n}×${n} weights; row = who looks, column = who is looked at.`,
    shape: ({ n, m }) => `${count(m.heads, "head")} × ${n}×${n}, every row sums to 1`,
  },
  {
    target: "dissection",
    anchor: ".step:nth-of-type(5)",
    title: () => "Weighted sum of values",
    text: ({ m }) =>
      `Each token's output from a head is the mix of all value vectors, each weighted by its attention: mostly the values of the tokens it attends to. ${m.head_dim} numbers per token per head.`,
    shape: ({ n, m }) => `${n}×${n} · ${n}×${m.head_dim} → ${n}×${m.head_dim} per head`,
  },
  {
    target: "dissection",
    anchor: ".step:nth-of-type(6)",
    title: () => "Concatenate and W_O",
    text: ({ m }) =>
      `The ${m.heads} heads' outputs are put side by side again (${m.heads} × ${m.head_dim} = ${m.hidden_size}), and one more ${m.hidden_size}×${m.hidden_size} matrix, W_O, mixes what the heads found.`,
    shape: ({ n, m }) => `${m.heads} × ${n}×${m.head_dim} → ${n}×${m.hidden_size} · W_O ${m.hidden_size}×${m.hidden_size} → ${n}×${m.hidden_size}`,
  },
  {
    target: "pipeline",
    anchor: ".blocks",
    title: ({ m }) => (m.normalization === "post-LN" ? "Residual + LayerNorm" : "Residual"),
    text: ({ m }) =>
      `The attention output is added to the block's input, so nothing the token had is lost (the "residual stream")${m.normalization === "post-LN" ? ", and the sum is normalised again" : ""}. The pipeline table lists both norms per block.`,
    shape: ({ n, m }) => `${n}×${m.hidden_size} + ${n}×${m.hidden_size} → ${n}×${m.hidden_size}`,
  },
  {
    target: "pipeline",
    anchor: ".blocks",
    title: () => "Feed-forward network",
    text: ({ m }) =>
      `Then each token on its own goes through ${m.intermediate_size} neurons ${m.ffn_gated ? `(${m.ffn}: ${m.ffn_activation} of one projection times another)` : `with ${m.ffn}`} and back down to ${m.hidden_size}, and is added to its input${m.normalization === "post-LN" ? " and normalised once more" : ""}. The table shows the most active neurons.`,
    shape: ({ n, m }) => `${n}×${m.hidden_size} → ${n}×${m.intermediate_size} (${m.ffn}) → ${n}×${m.hidden_size}`,
  },
  {
    target: "grid",
    title: ({ m }) => `× ${count(m.layers, "block")}`,
    text: ({ m }) =>
      `That was one block. The model stacks ${m.layers}, each with its own weights, the output of one feeding the next. Here are all ${m.layers * m.heads} attention maps; click one to open it.`,
    shape: ({ n, m }) => `${count(m.layers, "block")} × ${count(m.heads, "head")} × ${n}×${n}; ${n}×${m.hidden_size} in and out of each block`,
  },
  {
    target: "pooled",
    title: () => "Pooling",
    text: ({ n, pooling }) => `One vector for the whole text: the ${n} final token vectors become ${POOLING[pooling]}.`,
    shape: ({ n, m }) => `${n}×${m.hidden_size} → 1×${m.hidden_size}`,
  },
  {
    target: "pooled",
    title: () => "Normalise",
    text: ({ norm, m }) =>
      `${dense(m).length ? `First this model's Dense layers (${dense(m).map(({ shape }) => `${shape[1]} → ${shape[0]}`).join(", ")}) turn it into another vector. ` : ""}Finally the vector is divided by its length${norm === null || dense(m).length ? "" : ` (${fixed(norm)} here)`}, so it has length 1: texts are then compared by the angle between their vectors (cosine similarity).`,
    shape: ({ m }) => `1×${m.hidden_size} → 1×${dense(m).at(-1)?.shape[0] ?? m.hidden_size}, length 1`,
  },
  {
    target: "lessons",
    sets: () => ({ lesson: "explain" }),
    title: () => "Is attention explanation?",
    text: () =>
      "A large weight need not move much: a token's value vector can be short. Here the selected token's keys are ranked by raw weight, by what each weight really carries (‖α·f(x)‖), by each token's share in the block's output (ALTI), and by gradient attribution; the Measure switch redraws every view with these.",
    shape: ({ n }) => `4 rankings of ${n} keys, and how well they agree`,
  },
];

// The views a model without an adapter cannot fill (capabilities.js): their steps say why instead.
const NEEDS = { dissection: "worked_example", pipeline: "pipeline", lessons: "measures" };

const $ = (id) => document.getElementById(id);
const GAP = 8; // px between the box and the views around it
const PANEL_KEPT = 8; // rem of a step's panel kept in sight below the box

// What the step texts may use: the real shapes of the current run, or "N" before there is one.
function facts(state, model) {
  const { run } = state;
  const tokens = run ? run.tokens : [];
  const example = tokens[state.token ?? -1] ?? tokens.find((token) => !token.special) ?? null;
  return {
    n: run ? tokens.length : "N",
    m: model,
    example,
    pooling: run ? run.pooling : state.pooling,
    norm: run?.pooled?.norm ?? null, // null for an input past max_seq_length: its vector comes with its panel
  };
}

export const TOUR = { steps: STEPS, facts };

function render(state, model, tour) {
  const step = tour.steps[state.tour - 1];
  const context = tour.facts(state, model);
  $("tour-counter").textContent = `Step ${state.tour} of ${tour.steps.length}`;
  const reason = NEEDS[step.target] && missing(model, NEEDS[step.target]);
  $("tour-title").textContent = step.title(context);
  $("tour-text").textContent = reason ? `This step's view is not available for ${model.name}: ${reason}.` : step.text(context);
  $("tour-shape").textContent = reason ? "" : step.shape(context);
  $("tour-back").disabled = state.tour === 1;
  $("tour-next").textContent = state.tour === tour.steps.length ? "Finish" : "Next";
}

function overlaps(a, b) {
  return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
}

// The outlined part of a step's view: the panel's visible area for a view in a panel that scrolls (never the
// whole of a view taller than the screen), else the view itself.
function outlined(step) {
  const target = $(step.target);
  return target.closest(".panel-body") ?? target;
}

// On the stage, the box takes the largest place beside the heatmap that does not hold the step's view:
// the whole side column, the attends view when the view is a panel below it, or the panels' place below the
// attends view when the step is about the attends view. It is as tall as its text: its place takes that height
// (--tour-room), the view beside it in the column the rest (at least PANEL_KEPT).
// On a phone the box is a sheet along the bottom (lab.css), and the page scrolls the step's view to the top
// of the screen, above it.
const PHONE = window.matchMedia("(max-width: 899px)");

function place(dialog, step) {
  const target = $(step.target);
  if (PHONE.matches) {
    dialog.removeAttribute("style");
    document.body.classList.remove("tour-room", "tour-room-below");
    document.body.style.setProperty("--tour-sheet", `${dialog.offsetHeight}px`);
    return;
  }
  const avoid = [document.querySelector(".heatmap-column").getBoundingClientRect(), outlined(step).getBoundingClientRect(), target.getBoundingClientRect()];
  const rooms = [".side", ".attends-panel", ".panels"].map((selector) => ({ selector, box: document.querySelector(selector).getBoundingClientRect() }));
  const room = rooms
    .filter(({ box }) => box.height > 0 && !avoid.some((other) => overlaps(box, other)))
    .sort((a, b) => b.box.width * b.box.height - a.box.width * a.box.height)[0];
  const box = room?.box ?? { left: window.innerWidth / 2, top: GAP, width: window.innerWidth / 2 - GAP, height: window.innerHeight / 3 };
  Object.assign(dialog.style, { left: `${box.left + GAP / 2}px`, top: `${box.top + GAP / 2}px`, width: `${box.width - GAP}px`, maxHeight: "none" });
  const needed = dialog.scrollHeight + 2 * parseFloat(getComputedStyle(dialog).borderTopWidth);
  // The side column stacks the attends view over the panels: the box's place grows, the other takes the rest.
  const grows = [".attends-panel", ".panels"].includes(room?.selector) && rooms[0].box.height > box.height + 1;
  document.body.classList.toggle("tour-room", grows && room.selector === ".attends-panel");
  document.body.classList.toggle("tour-room-below", grows && room.selector === ".panels");
  // The view beside it keeps 40% of the column, or PANEL_KEPT where that is less; the box takes the rest it needs.
  const most = Math.max(rooms[0].box.height * 0.6, rooms[0].box.height - PANEL_KEPT * parseFloat(getComputedStyle(document.documentElement).fontSize));
  const height = grows ? Math.min(needed + GAP, most) : box.height;
  if (grows) document.documentElement.style.setProperty("--tour-room", `${height}px`);
  // Below the attends view, the grown place ends where the column does: its top moves up as it grows.
  if (grows && room.selector === ".panels") dialog.style.top = `${rooms[0].box.bottom - height + GAP / 2}px`;
  dialog.style.maxHeight = `${height - GAP}px`;
}

// A phone's page scrolled so that the step's view starts at the top of the screen, above the sheet; done when
// the step changes and when its view fills in, never on a mere resize (a phone's bar sliding away is one).
function bringIntoSight(step) {
  if (!PHONE.matches) return;
  const view = outlined(step);
  window.scrollTo({ top: view.getBoundingClientRect().top + window.scrollY - GAP, behavior: "instant" });
}

// The step's part of a tall panel, scrolled to the top of the panel's visible area.
function scrollToPart(step) {
  const { target, anchor } = step;
  const view = $(target);
  const scroller = view.closest(".panel-body");
  if (!scroller) return;
  const part = (anchor && view.querySelector(anchor)?.closest(".stage-row, .step, table, p")) || view;
  scroller.scrollTop += part.getBoundingClientRect().top - scroller.getBoundingClientRect().top - GAP / 2;
}

function highlight(step) {
  for (const node of document.querySelectorAll(".tour-focus")) {
    node.classList.remove("tour-focus");
    delete node.dataset.tourTarget;
  }
  if (step === null) return;
  outlined(step).classList.add("tour-focus");
  outlined(step).dataset.tourTarget = step.target; // the view it outlines
}


// lab: {getState, setState, subscribe, model}; tour: {steps, facts} (TOUR, or the encoder-decoder's PAIR_TOUR).
export function initTour(lab, tour) {
  const { getState, setState, model } = lab;
  const { steps } = tour;
  const stepOf = (number) => steps[number - 1];
  const go = (number) => setState({ tour: number > steps.length ? null : Math.max(1, number) });
  const dialog = $("tour");
  const opener = $("tour-start");
  opener.addEventListener("click", () => setState({ tour: getState().tour === null ? 1 : null }));
  $("tour-back").addEventListener("click", () => go(getState().tour - 1));
  $("tour-next").addEventListener("click", () => go(getState().tour + 1));
  $("tour-close").addEventListener("click", () => setState({ tour: null }));
  // The tour's keys stop here: outside the box the same arrows move the token selection.
  dialog.addEventListener("keydown", (event) => {
    const move = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
    if (event.key === "Escape") setState({ tour: null });
    else if (move) go(Math.min(steps.length, getState().tour + move));
    else return;
    event.preventDefault();
    event.stopPropagation();
  });

  const show = (state, changed) => {
    const open = state.tour !== null;
    if (changed.has("tour")) {
      const wasOpen = !dialog.hidden;
      const hadFocus = dialog.contains(document.activeElement);
      dialog.hidden = !open;
      opener.setAttribute("aria-expanded", String(open));
      const step = open ? stepOf(state.tour) : null;
      highlight(step);
      // A step about a view in a panel opens that panel.
      if (step?.target in PANELS && state.panel !== step.target) setState({ panel: step.target });
      if (open && !wasOpen) dialog.focus({ preventScroll: true });
      if (!open && hadFocus) opener.focus({ preventScroll: true }); // the page stays where the tour left it
    }
    // A step sets what it shows (a lesson, a kind of attention, a token) when it opens, and again when a run comes:
    // a link's step opens before its run.
    const sets = open && (changed.has("tour") || changed.has("run")) ? stepOf(state.tour).sets : null;
    if (sets) setState(sets(getState(), model));
    document.body.classList.toggle("touring", open);
    if (!open) document.body.classList.remove("tour-room", "tour-room-below");
    if (open) {
      render(getState(), model, tour); // as the step set it
      place(dialog, stepOf(state.tour));
      if (changed.has("tour") || changed.has("panel")) {
        bringIntoSight(stepOf(state.tour));
        scrollToPart(stepOf(state.tour));
      }
    }
    // A button disabled under the keyboard's focus would drop the focus to the page.
    if (open && document.activeElement?.disabled) dialog.focus({ preventScroll: true });
  };
  lab.subscribe((state, changed) => {
    if (["tour", "run", "token", "pooling", "panel", "present", "kind"].some((key) => changed.has(key))) show(state, changed);
  });
  // The views around the box move when the window changes size or a panel fills in.
  const observer = new ResizeObserver(() => getState().tour !== null && place(dialog, stepOf(getState().tour)));
  for (const selector of [".side", ".attends-panel", ".panels"]) observer.observe(document.querySelector(selector));
  // A panel filling in (or drawn again) is scrolled to the step's part once it is there.
  const filled = new ResizeObserver((entries) => {
    const step = getState().tour && stepOf(getState().tour);
    if (!step || !entries.some((entry) => entry.target === $(step.target))) return;
    bringIntoSight(step);
    scrollToPart(step);
  });
  for (const target of new Set(steps.map((step) => step.target))) filled.observe($(target));
  window.addEventListener("resize", () => getState().tour !== null && place(dialog, stepOf(getState().tour)));
  show(getState(), new Set(["tour"]));
}
