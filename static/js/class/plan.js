// A lesson plan: a title, the model it was made for, and steps, each a view (a prompt and how to look at
// it, as the view's link says it), an optional question for the class, an optional move of the lab's induction
// recipe (start, pause, resume), and a note for the teacher. Saved as a
// JSON file, or as a link that carries it compressed in its fragment (#plan=…, never sent to the server).
// Every field is checked as it is read: a plan is a file from anywhere.

import { deflate, inflate, readLink, viewOf } from "../state.js";
import { ABOUT_TRAINING } from "./question.js";

export const PLAN_FORMAT = "attention-lab lesson plan";
const MAX_STEPS = 60;
const LINK = "#plan=";
// The view's keys a step keeps (a link's parameter names): one person's own ones (presentation, colours,
// predict-first, the tour, the class) are not part of a lesson's view. An encoder-decoder's view adds its target
// and its kind of attention.
const STEP_KEYS = ["text", "pair", "segments", "mask", "pooling", "layer", "head", "heads", "token", "with", "blocks", "sinks", "measure", "panel", "lesson", "target", "kind"];
export const QUESTION_KINDS = ["attends", "cross_attends", "head", "next_token", "patch", "search", "grown_head", "loss_drop", "written", "temperature"];
// What a step does to the lab's induction recipe (the Grow panel's training): a plan names the recipe, never a
// grown model, whose name is its weights' digest and may differ between CPUs.
export const TRAINING_MOVES = ["start", "pause", "resume"];
export const PATCH_BY = ["head", "position"];
export const PATTERNS = ["previous", "cls", "sep", "period", "self", "next"];
// A question may be a test of what the class knows before the lesson and after it: one round, alone, no votes
// shown (the server's pre and post share right and Hake's gain measure it).
export const TESTS = ["pre", "post"];

function words(value, limit) {
  return typeof value === "string" ? value.slice(0, limit) : "";
}

// The step for the view on screen.
export function stepOf(state, { title, question, note }) {
  const view = Object.fromEntries(
    Object.entries(viewOf(state))
      .filter(([key]) => STEP_KEYS.includes(key))
      .map(([key, value]) => [key, /^\d+$/.test(value) ? Number(value) : value]), // a block, head or token reads as a number
  );
  return { title: words(title, 80) || `“${state.text.slice(0, 40)}”`, view, question, note: words(note, 2000) };
}

// A written question's writing: POST /api/generate's knobs by transformers' names (the prompt is the step's text).
const KNOBS = { max_new_tokens: "number", do_sample: "boolean", temperature: "number", top_k: "number", top_p: "number", seed: "number" };

function readWriting(writing) {
  const given = writing && typeof writing === "object" ? writing : {};
  return Object.fromEntries(Object.entries(KNOBS).filter(([key, type]) => typeof given[key] === type).map(([key]) => [key, given[key]]));
}

function readQuestion(question) {
  if (!question || !QUESTION_KINDS.includes(question.kind)) return null;
  const writes = question.kind === "written" || question.kind === "temperature";
  if (writes && !(Number.isInteger(question.index) && question.index >= 0)) return null; // which step it asks about
  if (question.kind === "patch" && !words(question.source, 2000).trim()) return null; // a patch needs its input B
  return {
    kind: question.kind,
    ...(question.kind === "head" ? { pattern: PATTERNS.includes(question.pattern) ? question.pattern : "previous" } : {}),
    ...(question.kind === "patch" ? { by: PATCH_BY.includes(question.by) ? question.by : "head", source: words(question.source, 2000) } : {}),
    ...(writes ? { index: question.index, writing: readWriting(question.writing) } : {}),
    ...(question.kind === "temperature" && Number.isInteger(question.rank) ? { rank: question.rank } : {}),
    ...(question.kind === "temperature" && Array.isArray(question.temperatures) && question.temperatures.every((t) => typeof t === "number" && t > 0) ? { temperatures: question.temperatures.slice(0, 4) } : {}),
    ...(question.kind === "search" && words(question.prefix, 200) ? { prefix: words(question.prefix, 200) } : {}),
    ...(question.kind === "search" && words(question.document_prefix, 200) ? { document_prefix: words(question.document_prefix, 200) } : {}),
    ...(question.kind === "search" && Array.isArray(question.documents) && question.documents.length >= 2 && question.documents.length <= 6 && question.documents.every((n) => Number.isInteger(n) && n >= 0)
      ? { documents: question.documents }
      : {}),
    ...(words(question.text, 200) ? { text: words(question.text, 200) } : {}),
    ...(TESTS.includes(question.test) && !ABOUT_TRAINING.includes(question.kind) ? { test: question.test } : {}), // never a test
  };
}

// A plan as read from JSON: unknown fields dropped, each view's parameters checked as a link's are.
export function readPlan(data) {
  if (!data || typeof data !== "object" || !Array.isArray(data.steps)) throw new Error("this is not a lesson plan: it has no list of steps");
  const steps = data.steps.slice(0, MAX_STEPS).map((step, index) => {
    const view = step && typeof step.view === "object" && step.view ? step.view : {};
    if (typeof view.text !== "string" || !view.text.trim()) throw new Error(`step ${index + 1} has no prompt (view.text)`);
    const kept = Object.fromEntries(Object.entries(view).filter(([key, value]) => STEP_KEYS.includes(key) && ["string", "number"].includes(typeof value)));
    const training = TRAINING_MOVES.includes(step.training) ? { training: step.training } : {};
    return { title: words(step.title, 80) || `Step ${index + 1}`, view: kept, question: readQuestion(step.question), ...training, note: words(step.note, 2000) };
  });
  // requires: what the plan needs of the model in words, where no one model is named ("a decoder that writes").
  return { format: PLAN_FORMAT, title: words(data.title, 120) || "Lesson", model: words(data.model, 200) || null, ...(words(data.requires, 300) ? { requires: words(data.requires, 300) } : {}), steps };
}

// What applying a step sets: its view, over the defaults of everything a link may leave out.
export function stepView(step, model) {
  const patch = readLink(step.view);
  const view = { pair: "", segments: "all", sinks: "show", measure: "weights", blockMean: false, panel: null, lesson: null, also: [], token: null, ...patch };
  if (view.head === "mean" && !patch.heads) view.heads = [...Array(model.heads).keys()];
  return view;
}

export async function planLink(plan, defaultModel) {
  const model = plan.model && plan.model !== defaultModel ? `?${new URLSearchParams({ model: plan.model })}` : "";
  return `${window.location.origin}/${model}${LINK}${await deflate(JSON.stringify(plan))}`;
}

// The plan a link opened the page with, or null.
export async function linkedPlan() {
  if (!window.location.hash.startsWith(LINK)) return null;
  return readPlan(JSON.parse(await inflate(window.location.hash.slice(LINK.length))));
}
