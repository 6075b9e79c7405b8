// The page: one state (mirrored in the URL), the views that follow it, and the controls that change it.

import * as api from "./api.js";
import { attendsView } from "./attends.js";
import { createAttentionView, stageBounds } from "./attention.js";
import { SCALES } from "./colors.js";
import { initClassroom } from "./classroom.js";
import { initControls, runPrompt, showError } from "./controls.js";
import { numbersOf } from "./data.js";
import { dissectionView } from "./dissection.js";
import { gridView } from "./grid.js";
import { initGrow } from "./grow.js";
import { LESSONS, lessonsView } from "./lessons/lessons.js";
import { initPanels, PANELS } from "./panels.js";
import { pipelineView } from "./pipeline.js";
import { pooledView } from "./pooled.js";
import { PAIR_TOUR } from "./seq2seq/tour.js";
import { createPairMapView, pairAttendsView, pairGridView, pairTokensView } from "./seq2seq/views.js";
import { initPredict } from "./predict.js";
import { getState, initState, setState, subscribe } from "./state.js";
import { tokensView } from "./tokens.js";
import { initTour, TOUR } from "./tour.js";
import { mountViews } from "./views.js";
import { initWrite } from "./write.js";

const config = JSON.parse(document.getElementById("lab-config").textContent);
const model = config.model;
// An encoder-decoder's run is a source, a target and three kinds of attention: views and a tour of their own (seq2seq/).
const pairRun = model.kind === "encoder-decoder";
const PAIR_PANELS = ["grid"];
const tour = pairRun ? PAIR_TOUR : TOUR;
api.useModel(model.name);

await initState(
  {
    text: config.defaultText, mask: model.default_mask, pooling: model.default_pooling, layer: 0, head: 0, token: null, present: false,
    sinks: "show", pair: "", segments: "all", also: [], preview: null, heads: [...Array(model.heads).keys()], blockMean: false,
    allHeads: false, predict: false, tour: null, lesson: null, panel: null, scale: "blues", classCode: null, measure: "weights",
    model: model.name, question: null, target: "", kind: "cross", promptName: model.default_prompt ?? "", patch: null, train: null, writing: null,
  },
  {
    defaultModel: config.defaultModel, defaultPrompt: model.default_prompt ?? "", layers: pairRun ? Math.max(model.layers, model.decoder_layers) : model.layers, heads: model.heads, masks: model.masks, poolings: model.poolings,
    prompts: Object.keys(model.prompts), tourSteps: tour.steps.length, lessons: pairRun ? [] : Object.keys(LESSONS), panels: pairRun ? PAIR_PANELS : Object.keys(PANELS), scales: Object.keys(SCALES),
  },
);

const readText = (text, token) => {
  setState({ text, token });
  runPrompt(lab);
};
const lab = { getState, setState, subscribe, model, defaultModel: config.defaultModel, numbers: () => numbersOf(getState().run.run_id), showError, readText };
if (pairRun) {
  // A link's block is the kind's own, at most.
  const { kind, layer } = getState();
  const blocks = kind === "encoder" ? model.layers : model.decoder_layers;
  if (layer >= blocks) setState({ layer: blocks - 1 });
  mountViews([pairTokensView, createPairMapView(lab, stageBounds), pairAttendsView, pairGridView], lab);
  initControls(lab, null);
  initPanels(lab, PAIR_PANELS);
  initTour(lab, tour);
  initClassroom(lab);
} else {
  const attention = createAttentionView(lab);
  mountViews([tokensView, attention, attendsView, dissectionView, gridView, pipelineView, pooledView, lessonsView], lab);
  initControls(lab, attention.heatmap);
  initPanels(lab);
  initPredict(lab);
  initWrite(lab);
  initTour(lab, tour);
  initClassroom(lab);
  initGrow(lab);
}
runPrompt(lab);
