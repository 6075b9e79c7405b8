// The teacher's side of a class: a panel docked beside the stage (never over it) with the join code, the QR
// code (large on demand), who is there, the question's flow — Ask (blind votes), Show votes (the histogram,
// no answer), Vote again (a second round), Reveal (the answer, its value, the share right per round and the
// change) — a pre-test's or post-test's Close (one round, nothing shown) and what the two measured, the
// answers as CSV, and the lesson plan. The teacher's view goes to the class as it changes.

import { startIndex } from "../api.js";
import { el } from "../format.js";
import { cannotAsk, questionAsk } from "./ask.js";
import { answersCSV, askQuestion, endClass, moveQuestion, qrURL, showView, startClass } from "./calls.js";
import { listen } from "./live.js";
import { initPlanner } from "./planner.js";
import { answerLine, changeLine, gainLine, phaseLine, rounds, writtenSoFar } from "./question.js";
import { sharedView, SHARED } from "./shared.js";
import { showStageGain, showVerdict } from "./stage.js";

const $ = (id) => document.getElementById(id);
const TEACHER_KEY = "attention-lab-class"; // sessionStorage: the class this tab teaches, and its secret

// The class this tab teaches ({code, secret, …}), or null: what a teacher's other actions (growing a model) send.
export function taughtClass() {
  return JSON.parse(sessionStorage.getItem(TEACHER_KEY) ?? "null");
}

// Said on the document when this tab starts or stops teaching a class: a panel with a teacher's controls (the
// Grow panel's questions) shows or hides them then, not at its next redraw.
export const TAUGHT_EVENT = "lab-class-taught";

export function initTeacher(lab) {
  const panel = $("class-panel");
  const opener = $("class-start");
  const show = keptInSight($("class-scroll"));
  let taught = taughtClass();
  let feed = null;
  let question = null;
  let phaseShown = null; // the question's id and phase last drawn: a new phase is scrolled into the panel's sight
  let unsaved = false; // votes came in since the answers were last downloaded: ending the class would lose them

  const openPanel = (open) => {
    panel.hidden = !open;
    opener.setAttribute("aria-pressed", String(open));
  };
  opener.addEventListener("click", () => openPanel(panel.hidden));
  $("class-fold").addEventListener("click", () => {
    const folded = panel.classList.toggle("folded");
    $("class-fold").setAttribute("aria-expanded", String(!folded));
    $("class-fold").textContent = folded ? "Unfold" : "Fold";
    // Unfolded, the panel shows where the class stands now: what it learned, else the question's phase.
    if (!folded) show($("class-gain").hidden ? $("class-phase") : $("class-gain"));
  });
  initQR();

  // The flow's buttons follow the question's phase, as the server says it is.
  const kind = $("class-kind");
  const showKind = () => {
    $("class-pattern-box").hidden = kind.value !== "head";
    $("class-source-box").hidden = !kind.value.startsWith("patch");
  };
  kind.addEventListener("change", showKind);
  showKind();
  const showFlow = () => {
    const live = taught !== null;
    const phase = question?.phase ?? null;
    const test = question?.test ?? null; // a test: one round, closed with nothing shown; a pre-test never revealed
    $("class-ask").disabled = !live;
    $("class-show").disabled = phase !== "open" || test !== null;
    $("class-again").disabled = !(phase === "shown" && question.round === 1);
    $("class-close").hidden = test === null;
    $("class-close").disabled = !(test !== null && phase === "open");
    $("class-reveal").disabled = test === "pre" || !["open", "shown", "closed"].includes(phase);
    $("class-csv").disabled = !live;
    const before = phaseShown;
    phaseShown = question ? `${question.id}:${question.phase}:${question.round}` : null;
    showQuestion(question, lab);
    if (question && phaseShown !== before) show($("class-gain").hidden ? $("class-phase") : $("class-gain"));
  };

  const act = (action) => async () => {
    try {
      await action();
    } catch (error) {
      lab.showError(`The class: ${error.message}.`);
    }
  };
  // Asked from the panel (the chosen kind) or by a lesson plan's step (its own kind, pattern, step, wording).
  const ask = async (chosen, options = {}) => {
    const why = cannotAsk(chosen, lab.getState(), lab.model);
    if (why) throw new Error(why);
    // A search question reads the lab's own corpus, indexed by the model (the first ask waits for its passes),
    // each document after a plan's typed document prefix: the index the search experiment reads with that box.
    if (chosen === "search" && !options.indexId) options = { ...options, indexId: (await startIndex({ prefix: options.documentPrefix ?? "" })).index_id };
    question = await askQuestion(taught, questionAsk(chosen, lab.getState(), options));
    showFlow();
  };
  const planner = initPlanner(lab, { ask: (chosen, options) => (taught ? ask(chosen, options) : null), open: () => openPanel(true), taught: () => taught });
  $("class-ask").addEventListener("click", act(() => ask(kind.value, { pattern: $("class-pattern").value, source: $("class-source").value, step: planner.step() })));
  for (const move of ["show", "again", "close", "reveal"]) {
    $(`class-${move}`).addEventListener(
      "click",
      act(async () => {
        question = await moveQuestion(taught, move);
        showFlow();
      }),
    );
  }
  $("class-csv").addEventListener(
    "click",
    act(async () => {
      download(await answersCSV(taught), `class-${taught.code}-answers.csv`);
      unsaved = false;
    }),
  );
  // Ending a class deletes its answers with it: with votes not yet downloaded, the first click asks again.
  const end = $("class-end");
  let armed = null;
  const disarm = () => {
    clearTimeout(armed);
    armed = null;
    end.textContent = "End the class";
    end.classList.remove("danger");
  };
  end.addEventListener(
    "click",
    act(async () => {
      if (unsaved && armed === null) {
        end.textContent = "Its answers go with it: click again to end, or take Answers as CSV first";
        end.classList.add("danger");
        armed = setTimeout(disarm, 8000);
        return;
      }
      disarm();
      await endClass(taught).catch(() => {}); // an expired class is ended already
      stop();
    }),
  );

  // A revealed answer is said on the projector's stage wherever no view marks it (stage.js).
  lab.subscribe(showVerdict);
  // The teacher's view reaches the class, a little after it settles (a dragged selection sends its end).
  let pushing = null;
  lab.subscribe((state, changed) => {
    if (!taught || !SHARED.some((key) => changed.has(key))) return;
    clearTimeout(pushing);
    pushing = setTimeout(() => showView(taught, sharedView(lab.getState())).catch((error) => lab.showError(error.message)), 60);
  });

  function live(started) {
    taught = started;
    sessionStorage.setItem(TEACHER_KEY, JSON.stringify(started));
    document.dispatchEvent(new Event(TAUGHT_EVENT));
    const { code } = started;
    $("class-code").textContent = code;
    $("class-opening").hidden = true;
    $("class-live").hidden = false;
    $("class-names").hidden = !started.anonymous;
    $("class-end").hidden = false;
    $("class-qr-show").replaceChildren(el("img", { id: "class-qr", src: qrURL(code), alt: `QR code of the join link for class ${code}` }));
    $("class-qr-code").textContent = code;
    $("class-join").href = started.join_url;
    $("class-join").textContent = started.join_url;
    $("class-qr-link").textContent = started.join_url;
    $("class-reach").hidden = started.reachable;
    $("class-reach").textContent = "Learners cannot open this address: it is this computer's own (127.0.0.1). Start the lab with --host 0.0.0.0 and open it at this computer's network address.";
    showView(started, sharedView(lab.getState())).catch((error) => lab.showError(error.message));
    feed = listen(lab, code, "teacher", {
      presence: showPresence,
      gain: (gain) => showGain(gain, show),
      question: (next) => {
        question = next;
        showFlow();
      },
      votes: (next) => {
        question = next;
        unsaved = true;
        showFlow();
      },
      ended: () => stop(),
    });
    showFlow();
  }

  function stop() {
    unsaved = false;
    feed?.close();
    feed = null;
    taught = null;
    question = null;
    sessionStorage.removeItem(TEACHER_KEY);
    document.dispatchEvent(new Event(TAUGHT_EVENT));
    lab.setState({ question: null });
    showGain(null, show);
    $("class-code").textContent = "";
    $("class-opening").hidden = false;
    $("class-live").hidden = true;
    $("class-end").hidden = true;
    showFlow();
  }

  $("class-open").addEventListener("click", act(async () => live(await startClass($("class-anonymous-start").checked))));
  if (taught) {
    openPanel(true);
    live(taught);
  }
  showFlow();
}

function showPresence({ learners, following, connected }) {
  const presence = $("class-presence");
  presence.textContent = learners ? `${learners} joined · ${following} following you · ${connected} connected` : "No learners yet.";
  presence.dataset.learners = String(learners);
  presence.dataset.following = String(following);
}

// What the class's pre-tests and post-tests measured, once one of each is closed (the server's ClassGain),
// brought into sight by `show` as it first comes.
function showGain(gain, show) {
  showStageGain(gain);
  const box = $("class-gain");
  const shown = !box.hidden;
  box.hidden = !gain;
  box.replaceChildren(...(gain ? [gainLine(gain, "class")] : []));
  if (gain && !shown) show(box);
}

// The question in the teacher's panel: where it stands, and once revealed, the answer, what the second round
// changed and both rounds.
function showQuestion(question, lab) {
  const phase = $("class-phase");
  const tally = $("class-tally");
  if (!question) {
    phase.textContent = "";
    tally.replaceChildren();
    return;
  }
  phase.dataset.phase = question.phase;
  if (question.phase === "revealed") {
    phase.textContent = answerLine(question);
    const head = question.choices[question.answer.choice].head ?? null; // a head question's, or a patch question's by head
    const open = head === null || head === lab.getState().head ? [] : [button(`Show head ${head}`, () => lab.setState({ layer: question.view.layer, head, blockMean: false }))];
    tally.replaceChildren(...writtenSoFar(question), changeLine(question), rounds(question), ...open);
    return;
  }
  // The question and its votes are on the stage; the panel says where it stands.
  const next = question.test
    ? { open: "Close it when everyone has answered.", closed: question.test === "post" ? "Reveal shows its answer." : "Its answer waits for the post-test." }[question.phase]
    : "The stage stays blind until Reveal.";
  phase.textContent = `${phaseLine(question)} ${next}`;
  tally.replaceChildren();
}

// Scrolls the panel's scrolling box (never the page) to a part of it: the question's new phase at the top,
// what follows (the rounds, once revealed) under it. The part stays at the top as the window is resized (the
// panel's width and type change with it, and the text above the part rewraps), until the teacher scrolls.
function keptInSight(box) {
  let kept = null;
  const place = () => {
    if (!kept?.isConnected || kept.hidden || !box.clientHeight) return;
    box.scrollTop += kept.getBoundingClientRect().top - box.getBoundingClientRect().top - 8;
  };
  new ResizeObserver(place).observe(box);
  for (const type of ["wheel", "touchstart", "pointerdown", "keydown"]) box.addEventListener(type, () => (kept = null), { passive: true });
  return (part) => {
    kept = part;
    place();
  };
}

function button(label, action) {
  const node = el("button", { type: "button" }, label);
  node.addEventListener("click", action);
  return node;
}

// The QR code, large over everything on demand; Esc, its button or a click beside it closes it.
function initQR() {
  const overlay = $("class-qr-large");
  const opener = $("class-qr-show");
  const close = () => {
    overlay.hidden = true;
    opener.focus({ preventScroll: true });
  };
  opener.addEventListener("click", () => {
    $("class-qr-big").replaceChildren(el("img", { src: $("class-qr").src, alt: $("class-qr").alt }));
    overlay.hidden = false;
    $("class-qr-close").focus();
  });
  $("class-qr-close").addEventListener("click", close);
  overlay.addEventListener("click", (event) => event.target === overlay && close());
  overlay.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    event.stopPropagation();
    close();
  });
}

function download(text, name) {
  const link = el("a", { href: URL.createObjectURL(new Blob([text], { type: "text/csv" })), download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

