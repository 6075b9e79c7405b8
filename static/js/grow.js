// The "Grow a model" panel: one click starts the lab's induction recipe (POST /api/train with {}), and the
// panel follows that training (or the one under way in the lab, so a class's screens follow the teacher's):
// its progress, its loss curves with the phase change, its heads × steps picture, and a slider over its
// checkpoints that runs the prompt on that checkpoint's model on the stage. The training is named in the
// state (and so in the URL) as `train`.

import * as api from "./api.js";
import { blind } from "./blind.js";
import { askQuestion } from "./class/calls.js";
import { TAUGHT_EVENT, taughtClass } from "./class/teacher.js";
import { runPrompt } from "./controls.js";
import { el } from "./format.js";
import { drawCurves, drawHeads, followWidth, HEAD_SCORES } from "./growth.js";
import { overStage } from "./over-stage.js";

const FOLLOW_MS = 1000; // how often a running training's status is read
// How often a paused or stopped one is: a learner's page has no other way to hear that the teacher resumed it.
const WAITING_MS = 3000;
// The recipe's tokens are syllables (ba be bi … da de …): ten of them twice is a prompt whose second half an
// induction head predicts. A page of another model has a prompt the grown model cannot read.
const SYLLABLE_PROMPT = "ko ra ti bu me sa lo ve du fi ko ra ti bu me sa lo ve du fi";
const SECOND_COPY_TOKEN = 13; // "bu", whose earlier copy was followed by "me"
const STATES = { running: "Growing", paused: "Paused", stopped: "Stopped (the server stopped)", cancelled: "Called off", done: "Done", failed: "Failed" };

const $ = (id) => document.getElementById(id);

export function initGrow(lab) {
  let status = null; // the training followed, as GET /api/train/{id} answers
  let chosen = null; // the slider's checkpoint index, null: the latest (it moves with the training)
  let timer = null;

  const fillScores = () => {
    $("grow-score").replaceChildren(...Object.entries(HEAD_SCORES).map(([key, about]) => el("option", { value: key }, about.name)));
  };
  fillScores();
  followWidth($("grow-curves"));
  followWidth($("grow-heads"));

  const open = () => lab.getState().panel === "grow";
  const checkpoint = () => (status && status.checkpoints.length ? status.checkpoints[chosen ?? status.checkpoints.length - 1] : null);
  // The page reads one of this training's checkpoints: another of them has its shape, and is run in place.
  const grownHere = () => status !== null && status.checkpoints.some((one) => one.model === lab.getState().model);

  // While the class votes on which head will become the induction head, nothing on the page names it.
  const voting = () => blind(lab.getState()) && lab.getState().question?.kind === "grown_head";

  function showProgress() {
    const running = status?.state === "running";
    const formedAlready = status?.phase_change?.formed !== null && status?.phase_change?.formed !== undefined;
    // Which head? Asked only before the head forms; when will the loss drop? Only before the measures mark its
    // phase change. Neither while a question is under way (open, its votes shown or closed): one at a time.
    const asking = blind(lab.getState());
    $("grow-ask").hidden = teacher() === null || formedAlready || asking;
    $("grow-ask-drop").hidden = teacher() === null || Boolean(status?.phase_change) || asking;
    // A learner's page watches the teacher's training: only the teacher starts, pauses or calls one off.
    const watching = learner();
    $("grow-start").hidden = watching || (status !== null && ["running", "paused", "stopped"].includes(status.state));
    $("grow-pause").hidden = watching || !running;
    $("grow-resume").hidden = watching || !(status && ["paused", "stopped", "cancelled"].includes(status.state));
    $("grow-cancel").hidden = watching || !(status && ["running", "paused", "stopped"].includes(status.state));
    $("grow-bar").hidden = status === null;
    $("grow-pictures").hidden = status === null || status.checkpoints.length === 0;
    if (status === null) {
      $("grow-progress").textContent = "";
      return;
    }
    $("grow-bar").max = status.steps;
    $("grow-bar").value = status.step;
    const parts = [`${STATES[status.state]}: step ${status.step.toLocaleString()} of ${status.steps.toLocaleString()}`];
    if (status.loss !== null) parts.push(`training loss ${status.loss.toFixed(2)}`);
    parts.push(`${status.seconds.toFixed(1)} s`);
    const formed = status.phase_change?.formed;
    if (voting()) parts.push("the heads are hidden while the class votes");
    else if (formed !== null && formed !== undefined) {
      const [layer, head] = status.checkpoints.at(-1).scores.induction_head;
      parts.push(`induction head ${layer}.${head} since step ${formed}`);
    }
    if (status.error) parts.push(status.error);
    $("grow-progress").textContent = parts.join(" · ");
  }

  function showChosen() {
    const slider = $("grow-slider");
    const count = status?.checkpoints.length ?? 0;
    slider.disabled = count === 0;
    slider.max = String(Math.max(0, count - 1));
    slider.value = String(chosen ?? Math.max(0, count - 1));
    const one = checkpoint();
    $("grow-open").disabled = one === null || one.model === lab.getState().model;
    if (one === null) {
      $("grow-chosen").textContent = "no checkpoint yet";
      return;
    }
    const [layer, head] = one.scores.induction_head;
    const onStage = one.model === lab.getState().model ? " (on the stage)" : "";
    const best = voting() ? "" : `best induction head ${layer}.${head} at ${one.scores.induction_score.toFixed(2)}, `;
    $("grow-chosen").textContent = `step ${one.step}: ${best}in-context loss ${one.scores.in_context_loss.toFixed(2)}${onStage}`;
    $("grow-open").textContent = grownHere() ? "Run the prompt on it" : "Open it on the stage";
  }

  // A learner's screen that follows the teacher's training shows it in its first screen (over-stage.js): the
  // stage's views say nothing of it until the teacher opens one of its checkpoints there.
  const lay = overStage(lab, "grow");
  const layOver = () => lay(status !== null && !grownHere() ? status.train_id : null);

  async function draw() {
    showProgress();
    showChosen();
    layOver();
    if (!open() || status === null || status.checkpoints.length === 0) return;
    const step = chosen === null ? null : status.checkpoints[chosen].step;
    $("grow-heads").hidden = voting();
    $("grow-heads-hidden").hidden = !voting();
    await Promise.all([drawCurves($("grow-curves"), status, step), voting() ? null : drawHeads($("grow-heads"), status, $("grow-score").value, step)]);
  }

  let reading = 0; // the latest follow's number: an older one's answer, come late, is dropped
  async function follow(trainId) {
    clearTimeout(timer);
    const mine = ++reading;
    let read;
    try {
      read = await api.training(trainId);
    } catch (error) {
      lab.showError(error.message);
      return;
    }
    if (mine !== reading) return;
    status = read;
    if (lab.getState().train !== trainId) lab.setState({ train: trainId });
    if (chosen === null) {
      const onStage = status.checkpoints.findIndex((one) => one.model === lab.getState().model);
      if (onStage >= 0) chosen = onStage; // the slider starts at the checkpoint the page reads
    }
    await draw();
    if (mine !== reading) return;
    if (status.state === "running") timer = setTimeout(() => follow(trainId), FOLLOW_MS);
    else if (["paused", "stopped"].includes(status.state)) timer = setTimeout(() => follow(trainId), WAITING_MS);
  }

  // A checkpoint on the stage: run in place on a page of the same training's model, or its own page otherwise
  // (another shape and another tokenizer), with a prompt its tokens can read.
  function showOnStage() {
    const one = checkpoint();
    if (one === null) return;
    if (grownHere()) {
      api.useModel(one.model);
      const picker = $("model-picker");
      if (picker && [...picker.options].some((option) => option.value === one.model)) picker.value = one.model;
      lab.setState({ model: one.model });
      runPrompt(lab);
      showChosen();
      return;
    }
    const text = status.spec.data === "repeats" ? SYLLABLE_PROMPT : lab.getState().text;
    // On the head the training's latest checkpoint calls its induction head, at a token of the second copy:
    // the slider then shows that one head before, during and after its phase change.
    const [layer, head] = status.checkpoints.at(-1).scores.induction_head;
    const token = status.spec.data === "repeats" ? SECOND_COPY_TOKEN : 0;
    const params = new URLSearchParams({ model: one.model, text, layer, head, token, panel: "grow", train: status.train_id });
    window.location.assign(`${window.location.pathname}?${params}`);
  }

  const teacher = () => {
    const taught = taughtClass();
    return taught?.code && taught?.secret ? { code: taught.code, secret: taught.secret } : null;
  };
  const learner = () => Boolean(lab.getState().classCode) && teacher() === null;

  async function act(work) {
    try {
      status = await work();
      if (lab.getState().train !== status.train_id) lab.setState({ train: status.train_id });
      chosen = null;
      await follow(status.train_id);
    } catch (error) {
      lab.showError(error.message);
    }
  }

  $("grow-start").addEventListener("click", () => act(() => api.startTraining({}, teacher())));
  // Asked before the head forms or the loss drops (before Start, too: the recipe's training is named by its
  // spec), revealed from the class panel once it has.
  for (const [id, kind] of [["grow-ask", "grown_head"], ["grow-ask-drop", "loss_drop"]]) {
    $(id).addEventListener("click", async () => {
      try {
        await askQuestion(teacher(), { kind, train_id: status?.train_id ?? null });
      } catch (error) {
        lab.showError(error.message);
      }
    });
  }
  for (const move of ["pause", "resume", "cancel"]) {
    $(`grow-${move}`).addEventListener("click", () => act(() => api.moveTraining(status.train_id, move, teacher())));
  }
  $("grow-score").addEventListener("change", draw);
  $("grow-slider").addEventListener("input", () => {
    const index = Number($("grow-slider").value);
    chosen = index === status.checkpoints.length - 1 && status.state === "running" ? null : index;
    draw();
  });
  // Let go (a drag's end, a key): on a page of this training's model, the stage follows at once.
  $("grow-slider").addEventListener("change", () => grownHere() && showOnStage());
  $("grow-open").addEventListener("click", showOnStage);

  // The training named by the link, else the one under way in the lab, else the latest: looked for once the
  // panel is first opened (the first screen asks for nothing more).
  let found = false;
  async function find() {
    found = true;
    $("grow").setAttribute("aria-busy", "true");
    let trainId = lab.getState().train;
    if (!trainId) {
      try {
        const listed = await api.trainings();
        trainId = listed.active ?? listed.trainings[0]?.train_id ?? null;
      } catch (error) {
        lab.showError(error.message);
      }
    }
    if (trainId) await follow(trainId);
    else showProgress();
    $("grow").dataset.view = status?.train_id ?? "none"; // what the panel shows: a training, or none yet
    $("grow").setAttribute("aria-busy", "false");
  }

  lab.subscribe((state, changed) => {
    // A training named anew (by the teacher's view, on a learner's page that follows it): followed from its start.
    if (changed.has("train") && state.train && state.train !== status?.train_id && found) {
      chosen = null;
      follow(state.train).then(() => ($("grow").dataset.view = status?.train_id ?? "none"));
      return;
    }
    if (changed.has("question") && found) draw();
    if (changed.has("panel") && open()) found ? draw() : find();
    else if (changed.has("present") && open()) draw();
  });
  document.addEventListener(TAUGHT_EVENT, showProgress); // a class started or ended: its questions' buttons
  showProgress();
  if (open() || lab.getState().train) find();
}
