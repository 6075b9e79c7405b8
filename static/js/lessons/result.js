// A lesson's result area while its runs are on their way: a note first, then whatever `work` draws,
// or the error in plain words if a request fails.

import { el } from "../format.js";

export async function fillResult(result, pending, work) {
  result.replaceChildren(el("p", { class: "hint" }, pending));
  try {
    await work();
  } catch (error) {
    result.replaceChildren(el("p", { class: "error" }, error.message));
  }
}
