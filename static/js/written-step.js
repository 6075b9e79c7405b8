// One written token opened (a step of POST /api/generate): the funnel its candidates went through (the raw
// logits' softmax, then each of transformers' logits processors in generate's order), the draw, its attention
// row in every block and head over every token before it, and the cache of keys and values the step reused.
// step: {index, position, token, text, read, reused, funnel: [{name, ids, tokens, probabilities, kept, mass}],
// draw: {how, token, ids, tokens, probabilities, waits, arrivals}, attention: {shape: [layer, head, key], dtype,
// data}, cache, cache_bytes}

import { decodeAttention } from "./api.js";
import { rgb, sequential } from "./colors.js";
import { count, el, fixed } from "./format.js";

// A token's text as the writing shows it: quoted, so that a leading space is seen.
export function quotedToken(text) {
  return `“${text}”`;
}

function stageName(name, settings) {
  if (name === "softmax") return "Raw: the softmax of the logits";
  if (name === "temperature") return `After the temperature (T = ${settings.temperature})`;
  if (name === "top_k") return `After top-k (k = ${settings.top_k})`;
  if (name === "top_p") return `After top-p (p = ${settings.top_p})`;
  return `After ${name}`;
}

function funnelView(step, settings) {
  return el(
    "div",
    { class: "funnel", dataset: { field: "funnel" } },
    ...step.funnel.map((stage, at) =>
      el(
        "table",
        { class: "softmax funnel-stage", dataset: { stage: stage.name } },
        el(
          "caption",
          {},
          el("strong", {}, stageName(stage.name, settings)),
          el("br"),
          at === 0 ? `${count(stage.kept, "token")} with a chance` : `${stage.kept} kept, ${fixed(100 * stage.mass, 1)}% of the chance before`,
        ),
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "token"), el("th", { scope: "col" }, "p"))),
        el(
          "tbody",
          {},
          // A token a stage filtered out has no chance left: listing it at 0 would contradict "k kept".
          ...stage.ids.flatMap((id, rank) =>
            stage.probabilities[rank] > 0
              ? [
                  el(
                    "tr",
                    { class: id === step.token ? "top" : "", dataset: { id: String(id), probability: String(stage.probabilities[rank]) } },
                    el("td", { title: `id ${id}` }, quotedToken(stage.tokens[rank])),
                    el("td", {}, fixed(stage.probabilities[rank])),
                  ),
                ]
              : [],
          ),
        ),
      ),
    ),
  );
}

function drawView(step) {
  const { draw } = step;
  if (draw.how === "argmax") {
    return el("p", { dataset: { field: "draw" } }, `Greedy: the likeliest token of the last stage, ${quotedToken(step.text)}, is written.`);
  }
  return el(
    "div",
    { dataset: { field: "draw" } },
    el(
      "p",
      {},
      `Sampled: every token waits a random time w ~ Exp(1) and arrives at w / p; the first to arrive is written, which happens to each token with exactly its probability p. ${quotedToken(step.text)} arrived first:`,
    ),
    el(
      "div",
      { class: "scroll-x" },
      el(
        "table",
        { class: "softmax" },
        el("thead", {}, el("tr", {}, ...["token", "p", "wait w", "arrival w / p"].map((name) => el("th", { scope: "col" }, name)))),
        el(
          "tbody",
          {},
          ...draw.ids.map((id, at) =>
            el(
              "tr",
              { class: id === draw.token ? "top" : "", dataset: { id: String(id) } },
              el("td", {}, quotedToken(draw.tokens[at])),
              el("td", {}, fixed(draw.probabilities[at])),
              el("td", {}, fixed(draw.waits[at])),
              el("td", {}, fixed(draw.arrivals[at])),
            ),
          ),
        ),
      ),
    ),
  );
}

// keys: the text of every token the row reads (the prompt's, then those written before this one).
function attentionView(step, keys) {
  const reader = quotedToken(keys[step.position - 1]);
  const [layers, heads, length] = step.attention.shape;
  const { values } = decodeAttention(step.attention);
  const row = (layer, head) => Array.from(values.subarray((layer * heads + head) * length, (layer * heads + head + 1) * length));
  return el(
    "div",
    { dataset: { field: "attention" } },
    el("p", { class: "hint" }, `The row of ${reader} (token ${step.position - 1}, the last token read) in every block and head, from this step's cached pass: how much it attends to each token before it.`),
    ...Array.from({ length: layers }, (_, layer) =>
      el(
        "div",
        { class: "scroll-x" },
        el(
          "table",
          { class: "written-row", dataset: { layer: String(layer) } },
          el("caption", {}, `Block ${layer}`),
          el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "head"), ...keys.slice(0, step.position).map((text, key) => el("th", { scope: "col", title: `token ${key}` }, quotedToken(text))))),
          el(
            "tbody",
            {},
            ...Array.from({ length: heads }, (_, head) =>
              el(
                "tr",
                { dataset: { head: String(head) } },
                el("th", { scope: "row" }, String(head)),
                ...row(layer, head).map((weight, key) =>
                  el(
                    "td",
                    { style: `background:${rgb(sequential(weight))};color:${weight > 0.55 ? "#fff" : "inherit"}`, title: `block ${layer}, head ${head}, token ${key}: ${weight}`, dataset: { key: String(key), value: String(weight) } },
                    fixed(weight, 2),
                  ),
                ),
              ),
            ),
          ),
        ),
      ),
    ),
  );
}

function kib(bytes) {
  return `${fixed(bytes / 1024, 1)} KiB`;
}

function cacheView(step) {
  const [first] = step.cache;
  const kept = step.cache.map((block) => block.tokens);
  const same = kept.every((tokens) => tokens === kept[0]);
  return el(
    "p",
    { dataset: { field: "cache", bytes: String(step.cache_bytes) } },
    `This step read ${count(step.read, "new token")} and reused the keys and values of ${count(step.reused, "earlier token")} from the cache instead of computing them again. `,
    `After it, the cache keeps ${same ? `${count(kept[0], "token")} in each of the ${count(step.cache.length, "block")}` : `${kept.join(", ")} tokens in blocks 0 to ${step.cache.length - 1} (a window keeps only its last tokens)`}: `,
    `keys and values of shape [${first.shape.join(", ")}] each, `,
    el("strong", { dataset: { field: "cache-bytes" } }, kib(step.cache_bytes)),
    ` in all (${kib(first.bytes)} a block).`,
  );
}

// writing: the answer so far ({prompt, settings, steps}); index: the step to open.
export function stepView(writing, index) {
  const step = writing.steps[index];
  const keys = [...writing.prompt.map((token) => token.text), ...writing.steps.map((written) => written.text)];
  return el(
    "section",
    { class: "written-step", dataset: { step: String(index), token: String(step.token) } },
    el("h3", {}, `Token ${index + 1} written: ${quotedToken(step.text)} (id ${step.token}, position ${step.position})`),
    el(
      "p",
      { class: "controls" },
      el("button", { type: "button", class: "write-read", dataset: { field: "read-sequence", step: String(index) } }, "Read the sequence so far"),
      el("span", { class: "hint" }, "The lab's views on the prompt and the tokens written up to this one (read again from their text)."),
    ),
    el("h4", {}, "The funnel: its candidates at each stage"),
    funnelView(step, writing.settings),
    drawView(step),
    el("h4", {}, "Its attention row"),
    attentionView(step, keys),
    el("h4", {}, "The cache of keys and values"),
    cacheView(step),
  );
}
