// How the page's views are run. A view is a plain object:
//   id        the element it draws into; once drawn, its data-view says what it shows (run:layer:head:token)
//   follows   the state keys (or a function of the state giving them) whose change redraws it
//   load      (state, lab) → a promise of the numbers it needs (optional)
//   render    (state, data, lab) draws them (and may return a promise)
//   moves     keys whose change calls move(state, lab) instead: a cheap update of what is drawn
//   shown     (state) → whether it is on screen: a hidden view is drawn when it is next shown
//   blank     (state, lab) draws the view with none of its numbers: while the class votes blind (blind.js)
//             it is called instead of load and render, and the view is drawn again once the answer is
//             revealed. A view without it shows no numbers a question could ask about (the tokens).
// A view is refreshed only when a key it follows changes, and only its newest request is drawn. While it
// waits for its numbers its element is aria-busy (lab.css fades the old picture under "Computing…" at
// once), and the old picture keeps its own title until the new one replaces both.
// lab: {getState, setState, subscribe, model, numbers (the current run's RunNumbers), showError}.

import { blind } from "./blind.js";
import { byId } from "./root.js";

function viewKey({ run, layer, head, token }) {
  return `${run.run_id}:${layer}:${head}:${token}`;
}

export function mountViews(views, lab) {
  const latest = new Map(); // view → number of its newest request
  const drawn = new Map(); // view → number of the request it last drew
  const stale = new Set(views); // views with changes they have not drawn (hidden, or never drawn)
  const blanked = new Set(); // views drawn blank for a blind vote, and not drawn since
  const element = (view) => byId(view.id);
  const follows = (view, state) => (typeof view.follows === "function" ? view.follows(state) : view.follows);

  async function refresh(view) {
    const state = lab.getState();
    if (view.shown && !view.shown(state)) {
      stale.add(view);
      return;
    }
    const mine = (latest.get(view) ?? 0) + 1;
    latest.set(view, mine); // a request on its way is not drawn over a blank either
    if (view.blank && blind(state)) {
      element(view).setAttribute("aria-busy", "false");
      stale.add(view); // drawn once the class may see it
      if (!blanked.has(view)) {
        blanked.add(view);
        view.blank(state, lab);
        element(view).dataset.view = "blind";
      }
      return;
    }
    blanked.delete(view);
    stale.delete(view);
    element(view).setAttribute("aria-busy", "true");
    try {
      const data = view.load ? await view.load(state, lab) : null;
      if (latest.get(view) !== mine) return;
      // Any change the view follows starts a newer request, so the state now is the state it loaded for.
      await view.render(lab.getState(), data, lab); // a render may wait too (a chart's library)
      drawn.set(view, mine);
      element(view).dataset.view = viewKey(lab.getState());
    } catch (error) {
      if (latest.get(view) === mine) lab.showError(error.message);
    } finally {
      if (latest.get(view) === mine) element(view).setAttribute("aria-busy", "false");
    }
  }

  lab.subscribe((state, changed) => {
    if (!state.run) return;
    for (const view of views) {
      const sight = view.blank && changed.has("question") && blind(state) !== blanked.has(view);
      if (sight || follows(view, state).some((key) => changed.has(key)) || (stale.has(view) && (!view.shown || view.shown(state)))) {
        refresh(view);
      } else if (view.moves?.some((key) => changed.has(key)) && drawn.has(view) && !blanked.has(view)) {
        view.move(state, lab);
        if (drawn.get(view) === latest.get(view)) element(view).dataset.view = viewKey(state);
      }
    }
  });
}
