// The whole model at a glance: one small picture per (block, head), drawn straight onto canvases.

import { el, sequential } from "./format.js";

// overview: {shape: [layer, head, size, size], values: Uint8Array}, each head shrunk by the server.
export function renderGrid(container, { overview, current, onOpen }) {
  const [layers, heads, n] = overview.shape;
  const cells = [];
  for (let layer = 0; layer < layers; layer += 1) {
    cells.push(el("span", { class: "grid-label" }, `block ${layer}`));
    for (let head = 0; head < heads; head += 1) {
      const offset = (layer * heads + head) * n * n;
      const canvas = el("canvas", { width: n, height: n });
      paint(canvas, overview.values.subarray(offset, offset + n * n), n);
      const isCurrent = current.layer === layer && current.head === head;
      cells.push(
        el(
          "button",
          {
            type: "button",
            class: `grid-cell${isCurrent ? " current" : ""}`,
            "aria-label": `Open block ${layer}, head ${head}`,
            title: `block ${layer} · head ${head}`,
            dataset: { layer: String(layer), head: String(head) },
          },
          canvas,
        ),
      );
    }
  }
  const header = [el("span"), ...Array.from({ length: heads }, (_, head) => el("span", { class: "grid-label" }, `head ${head}`))];
  container.style.setProperty("--heads", String(heads));
  container.replaceChildren(...header, ...cells);
  container.onclick = (event) => {
    const cell = event.target.closest(".grid-cell");
    if (cell) onOpen(Number(cell.dataset.layer), Number(cell.dataset.head));
  };
}

export function markCurrent(container, layer, head) {
  for (const cell of container.querySelectorAll(".grid-cell")) {
    cell.classList.toggle("current", Number(cell.dataset.layer) === layer && Number(cell.dataset.head) === head);
  }
}

// Each head scaled to its own maximum, so a head that spreads its weight thinly is still visible.
function paint(canvas, matrix, n) {
  const context = canvas.getContext("2d");
  const image = context.createImageData(n, n);
  const largest = matrix.reduce((max, value) => Math.max(max, value), 1);
  matrix.forEach((value, cell) => {
    const [r, g, b] = sequential(value / largest);
    image.data.set([r, g, b, 255], cell * 4);
  });
  context.putImageData(image, 0, 0);
}
