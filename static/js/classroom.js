// Live class mode. The teacher's page ("Start a class") shows a join code and QR code, pushes its view to
// the class as it changes, asks the class which token the selected token attends to most, and reveals the
// answer. A learner's page (opened from the join link, ?class=CODE) follows the teacher's view over
// Server-Sent Events until it goes free, and answers the class's questions.

import { runPrompt } from "./controls.js";
import { el, fixed } from "./format.js";

const $ = (id) => document.getElementById(id);
// The view a class shares: what the URL carries, less what is one person's own (presentation, colours).
const SHARED = ["model", "text", "pair", "mask", "pooling", "layer", "head", "heads", "blockMean", "token", "also", "panel", "tour", "sinks", "segments", "lesson"];
const RUN_INPUTS = ["text", "pair", "mask", "pooling"];
const TEACHER_KEY = "attention-lab-class"; // sessionStorage: the class this tab teaches, and its secret

async function call(method, url, body, secret) {
  const headers = { "content-type": "application/json", ...(secret ? { "X-Class-Secret": secret } : {}) };
  const response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!response.ok) {
    const detail = await response.json().then((answer) => answer.detail, () => "");
    throw new Error(detail || `the class could not do that (error ${response.status})`);
  }
  return response.status === 204 ? null : response.json();
}

export function initClassroom(lab) {
  const code = lab.getState().classCode;
  if (code) {
    learn(lab, code);
    return;
  }
  const taught = JSON.parse(sessionStorage.getItem(TEACHER_KEY) ?? "null");
  if (taught) teach(lab, taught);
  $("class-start").addEventListener("click", async () => {
    try {
      const started = taught ?? (await call("POST", "/api/classes"));
      sessionStorage.setItem(TEACHER_KEY, JSON.stringify(started));
      teach(lab, started);
    } catch (error) {
      lab.showError(`The class could not start: ${error.message}.`);
    }
  });
  $("class-hide").addEventListener("click", () => {
    $("class-panel").hidden = true;
  });
}

function shared(state) {
  return Object.fromEntries(SHARED.map((key) => [key, state[key]]));
}

// The teacher's side.
let teaching = null;

function teach(lab, started) {
  $("class-panel").hidden = false;
  if (teaching) return;
  teaching = started;
  const { code, secret } = started;
  $("class-code").textContent = code;
  $("class-qr-box").replaceChildren(el("img", { id: "class-qr", src: `/api/classes/${code}/qr.svg`, alt: `QR code of the join link for class ${code}`, width: "200", height: "200" }));
  $("class-join").href = started.join_url;
  $("class-join").textContent = started.join_url;
  $("class-reach").hidden = started.reachable;
  $("class-reach").textContent = "Learners cannot open this address: it is this computer's own (127.0.0.1). Start the lab with --host 0.0.0.0 and open it at this computer's network address.";
  let pushing = null;
  const push = () => {
    clearTimeout(pushing);
    pushing = setTimeout(() => call("PUT", `/api/classes/${code}/view`, { view: shared(lab.getState()) }, secret).catch((error) => lab.showError(error.message)), 60);
  };
  lab.subscribe((state, changed) => {
    if (SHARED.some((key) => changed.has(key))) push();
  });
  push();
  let question = null;
  const events = new EventSource(`/api/classes/${code}/events`);
  events.addEventListener("snapshot", (event) => {
    const snapshot = JSON.parse(event.data);
    showPresence(snapshot);
    if (snapshot.question) drawTally(question ?? snapshot.question, snapshot.tally, null);
  });
  events.addEventListener("presence", (event) => showPresence(JSON.parse(event.data)));
  events.addEventListener("tally", (event) => question && drawTally(question, JSON.parse(event.data).tally, null));
  $("class-ask").addEventListener("click", async () => {
    const state = lab.getState();
    if (!state.run || state.token === null || state.head === "mean" || state.blockMean) {
      lab.showError("To ask the class, select one token in one head of one block.");
      return;
    }
    const token = state.run.tokens[state.token];
    question = {
      text: `Which token does “${token.text}” attend to most in block ${state.layer}, head ${state.head}?`.slice(0, 200),
      layer: state.layer,
      head: state.head,
      token: state.token,
      run_id: state.run.run_id,
      choices: state.run.tokens.map((choice) => choice.text),
    };
    try {
      await call("POST", `/api/classes/${code}/question`, question, secret);
      $("class-reveal").disabled = false;
      drawTally(question, {}, null);
    } catch (error) {
      lab.showError(error.message);
    }
  });
  $("class-reveal").addEventListener("click", async () => {
    const numbers = await lab.numbers().query(question.layer, question.head, question.token);
    const answer = numbers.weights.indexOf(Math.max(...numbers.weights));
    try {
      const revealed = await call("POST", `/api/classes/${code}/reveal`, { answer, weight: numbers.weights[answer] }, secret);
      drawTally(question, revealed.tally, { answer, weight: numbers.weights[answer] });
      $("class-reveal").disabled = true;
    } catch (error) {
      lab.showError(error.message);
    }
  });
}

function showPresence({ learners, following, connected }) {
  $("class-presence").textContent = learners ? `${learners} learners joined · ${following} following you · ${connected} connected now` : "No learners yet.";
  $("class-presence").dataset.following = String(following);
  $("class-presence").dataset.learners = String(learners);
}

// The class's answers as bars, one per token chosen at least once (and the true answer once revealed).
function drawTally(question, tally, revealed) {
  const total = Object.values(tally).reduce((sum, count) => sum + count, 0);
  const largest = Math.max(1, ...Object.values(tally));
  const chosen = Object.keys(tally).map(Number);
  const shown = [...new Set([...chosen, ...(revealed ? [revealed.answer] : [])])].sort((a, b) => a - b);
  $("class-tally").dataset.total = String(total);
  $("class-tally").replaceChildren(
    el("p", { class: "caption" }, question.text),
    el("p", { class: "hint" }, total ? `${total} answers` : "Waiting for answers…"),
    ...shown.map((index) =>
      el(
        "div",
        { class: `tally-row${revealed?.answer === index ? " answer" : ""}`, dataset: { token: String(index), count: String(tally[index] ?? 0) } },
        el("span", { class: "tally-token" }, question.choices[index]),
        el("span", { class: "tally-bar", style: `width:${(100 * (tally[index] ?? 0)) / largest}%` }),
        el("span", {}, String(tally[index] ?? 0)),
      ),
    ),
    // replaceChildren writes a null as the text "null": before the reveal there is no answer line at all.
    ...(revealed ? [el("p", { class: "caption", dataset: { field: "answer" } }, `Answer: “${question.choices[revealed.answer]}”, weight ${fixed(revealed.weight)}.`)] : []),
  );
}

// The learner's side.
async function learn(lab, code) {
  $("class-bar").hidden = false;
  $("class-start").hidden = true;
  const follow = $("class-follow");
  const nickname = $("class-nickname");
  nickname.value = localStorage.getItem("attention-lab-nickname") ?? "";
  let learner;
  try {
    learner = (await call("POST", `/api/classes/${code}/learners`, { nickname: nickname.value })).learner;
  } catch (error) {
    $("class-status").textContent = `Could not join class ${code}: ${error.message}.`;
    return;
  }
  let following = true;
  let latest = null;
  const update = () => call("PUT", `/api/classes/${code}/learners/${learner}`, { following, nickname: nickname.value }).catch(() => {});
  nickname.addEventListener("change", () => {
    localStorage.setItem("attention-lab-nickname", nickname.value);
    update();
  });
  follow.addEventListener("click", () => {
    following = !following;
    follow.setAttribute("aria-pressed", String(following));
    follow.textContent = following ? "Following the teacher" : "Exploring alone · follow again";
    $("class-status").textContent = following ? `Class ${code}: your screen follows the teacher.` : `Class ${code}: you explore on your own.`;
    update();
    if (following && latest) apply(lab, latest);
  });
  const events = new EventSource(`/api/classes/${code}/events`);
  events.addEventListener("open", () => {
    $("class-status").textContent = following ? `Class ${code}: your screen follows the teacher.` : `Class ${code}: you explore on your own.`;
  });
  events.addEventListener("error", () => {
    $("class-status").textContent = `Class ${code}: reconnecting…`;
  });
  const onView = (view) => {
    latest = view;
    if (following && view) apply(lab, view);
  };
  events.addEventListener("snapshot", (event) => {
    const snapshot = JSON.parse(event.data);
    onView(snapshot.view);
    if (snapshot.question) ask(code, learner, snapshot.question);
  });
  events.addEventListener("view", (event) => onView(JSON.parse(event.data).view));
  events.addEventListener("question", (event) => ask(code, learner, JSON.parse(event.data).question));
  events.addEventListener("reveal", async (event) => {
    const reveal = JSON.parse(event.data);
    const { score } = await call("GET", `/api/classes/${code}/learners/${learner}/score`);
    const [right, asked] = score.split("/");
    const box = $("class-question");
    const choice = box.querySelector(".choices")?.children[reveal.answer]?.textContent ?? `token ${reveal.answer}`;
    box.replaceChildren(el("p", { dataset: { field: "reveal", score } }, `The answer: “${choice}”, with weight ${fixed(reveal.weight)}. Your score: ${right} of ${asked}.`));
  });
}

// The teacher's view, applied: a new prompt runs the model; the rest only moves the views.
function apply(lab, view) {
  const before = lab.getState();
  if (view.model && view.model !== before.model) {
    // The teacher reads another model: that is another page, joined to the same class.
    window.location.assign(`/?${new URLSearchParams({ model: view.model, text: view.text ?? before.text, class: before.classCode })}`);
    return;
  }
  const patch = Object.fromEntries(SHARED.filter((key) => key in view).map((key) => [key, view[key]]));
  lab.setState(patch);
  if (RUN_INPUTS.some((key) => key in patch && patch[key] !== before[key]) || !before.run) runPrompt(lab);
}

function ask(code, learner, question) {
  const box = $("class-question");
  box.hidden = false;
  const choices = el("div", { class: "choices", role: "group", "aria-label": "Your answer" });
  const mine = el("p", { class: "hint" }, "Pick a token: your answer is counted without your name.");
  for (const [index, text] of question.choices.entries()) {
    const button = el("button", { type: "button", "aria-pressed": "false", dataset: { index: String(index) } }, text);
    button.addEventListener("click", async () => {
      try {
        await call("POST", `/api/classes/${code}/learners/${learner}/answers`, { question: question.id, token: index });
        for (const other of choices.children) other.setAttribute("aria-pressed", String(other === button));
        mine.textContent = `Your answer: “${text}”. Wait for the teacher to reveal it.`;
      } catch (error) {
        mine.textContent = error.message;
      }
    });
    choices.append(button);
  }
  box.replaceChildren(el("p", { class: "caption" }, question.text), choices, mine);
}
