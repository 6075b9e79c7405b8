// A learner's screen that follows the teacher's work in a panel (a training, a writing) shows it in its first
// screen: the panel laid over the stage (panels.js's Enlarge), whose views say nothing of that work, and the bars
// above them folded away (lab.css: body[data-laid-over]); "Back to the stage" gives them back. Laid over once for
// each thing followed, so that a learner who went back to the stage stays there. (A phone's page scrolls.)

const ONE_SCREEN = matchMedia("(min-width: 900px) and (min-height: 500px)");

// lab: {getState}; panel: the panel's name in the state. Returns lay(key): `key` names what the panel shows
// (a training's id, a writing's), or null for nothing followed; the panel is laid over while it is open on a
// learner's page that follows the teacher (body.following: class/learner.js, a learner's page only).
export function overStage(lab, panel) {
  let laidOver = null; // what this panel was laid over the stage for
  return (key) => {
    const body = document.body;
    const over = key !== null && lab.getState().panel === panel && body.classList.contains("following");
    if (over) body.dataset.laidOver = panel;
    else if (body.dataset.laidOver === panel) delete body.dataset.laidOver;
    const now = over ? key : null;
    if (now === laidOver || !ONE_SCREEN.matches) return;
    laidOver = now;
    if (!over && body.dataset.laidOver) return; // another panel lies over the stage now: it keeps it
    if (document.getElementById("views").classList.contains("enlarged") !== over) document.getElementById("panel-enlarge").click();
  };
}
