// The guided tour of an encoder-decoder's page (tour.js runs it): the source and the target, the encoder's
// self-attention, the decoder's masked self-attention, cross-attention, what one target word reads and every
// head, with the run's real counts. A step about a kind of attention shows that kind.

import { count } from "../format.js";
import { measureOf } from "../measures.js";
import { KINDS, switchKind } from "./kinds.js";

// The target word the attends step opens: the selected one, unless it is a special token (the start token the rows
// begin with), else the first word.
function targetWord({ run, token }) {
  const tokens = run?.target.tokens ?? [];
  if (token !== null && token < tokens.length && !tokens[token].special) return token;
  return tokens.find((t) => !t.special)?.index ?? 0;
}

const showing = (kind) => (state, model) => switchKind(state, model, kind);

// s, t: the source's and the target's token counts ("S", "T" before a run); L, D: the encoder's and the decoder's
// blocks; H: the heads of each.
const STEPS = [
  {
    target: "tokens",
    title: () => "Source and target",
    text: ({ s, t, start, written }) =>
      `The encoder reads the source, cut into ${count(s, "token")}. The decoder reads the target, ${count(t, "token")} from its start token${start ? ` “${start}”` : ""}${written ? " (written here by the model, one token at a time)" : ""}: each target token is the step that chooses the next one.`,
    shape: ({ s, t }) => `${s} source tokens → ${t} target tokens`,
  },
  {
    target: "heatmap",
    sets: showing("encoder"),
    title: () => "Encoder self-attention",
    text: ({ s, L, H }) =>
      `Each of the encoder's ${count(L, "block")} has ${count(H, "head")}. In each head every source token attends to every source token, before and after it (no mask): a ${s}×${s} map of weights, each row adding up to 1. Rows look, columns are looked at.`,
    shape: ({ s, L, H }) => `${count(L, "block")} × ${count(H, "head")} × ${s}×${s}`,
  },
  {
    target: "heatmap",
    sets: showing("decoder"),
    title: () => "Decoder self-attention, masked",
    text: ({ t, D, H }) =>
      `The decoder's ${count(D, "block")}, ${count(H, "head")} each, read the target the same way but masked: a target token attends only to itself and the tokens before it, never to those it has yet to choose, so above the diagonal of each ${t}×${t} map there is nothing.`,
    shape: ({ t, D, H }) => `${count(D, "block")} × ${count(H, "head")} × ${t}×${t}, causal`,
  },
  {
    target: "heatmap",
    sets: showing("cross"),
    title: () => "Cross-attention",
    text: ({ s, t, D }) =>
      `In each of the decoder's ${count(D, "block")}, after its self-attention, every target token attends to the encoder's output: ${t} target rows × ${s} source columns. Each row is the step that chooses the next target word, and where it reads most shows which source tokens that choice draws on: in a translation model, the alignment picture.`,
    shape: ({ s, t, D, H }) => `${count(D, "block")} × ${count(H, "head")} × ${t}×${s} (target × source)`,
  },
  {
    target: "attends",
    sets: (state, model) => ({ ...switchKind(state, model, "cross"), token: targetWord(state) }),
    title: () => "What a target word reads",
    text: ({ s, word, next, index, measure }) =>
      `${word ? `“${word}” (target token ${index}) is the step that ${next ? `chooses “${next}”` : "comes after the last target token"}. ` : ""}Its row of cross-attention is drawn here: a line and a bar to each of the ${count(s, "source token")}, as wide as its ${measure}. Click another target token to follow it.`,
    shape: ({ s, t }) => `1 row of the ${t}×${s} map: ${s} numbers`,
  },
  {
    target: "grid",
    title: () => "Every block and head",
    text: ({ L, D, H, kind }) =>
      `Each kind has one map per block and head: the encoder's self-attention ${L} × ${H}, the decoder's self-attention ${D} × ${H} and its cross-attention ${D} × ${H}, ${H * (L + 2 * D)} maps in all. Here are those of ${kind}; click one to open it, or pick another kind of attention above.`,
    shape: ({ L, D, H }) => `${L}×${H} + ${D}×${H} + ${D}×${H} = ${H * (L + 2 * D)} maps`,
  },
];

function facts(state, model) {
  const { run } = state;
  const target = run?.target.tokens ?? [];
  const index = run ? targetWord(state) : null;
  return {
    s: run ? run.source.tokens.length : "S",
    t: run ? target.length : "T",
    start: target[0]?.label,
    written: run?.target.written,
    L: model.layers,
    D: model.decoder_layers,
    H: model.heads,
    index,
    word: target[index]?.label,
    next: target[index + 1]?.label,
    measure: measureOf(state.measure).name,
    kind: KINDS[state.kind].name,
  };
}

export const PAIR_TOUR = { steps: STEPS, facts };
