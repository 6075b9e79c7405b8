// One attention matrix drawn on a canvas: rows are queries (who looks), columns keys (who is looked at).
// A 512×512 matrix draws in milliseconds; selecting a token only moves the row outline.

import { el, fixed, rgb, sequential } from "./format.js";

const SIDE = 560; // px of the square plot at most
const FRAME = 200; // px beside the plot: axis title, token labels, colour bar
const MAX_CELL = 40; // px: a 5-token matrix stays a readable size, not a wall
const MIN_LABEL_GAP = 13; // px between axis labels; beyond that they thin out

export class Heatmap {
  constructor(container, onSelect) {
    this.container = container;
    this.onSelect = onSelect;
    this.title = el("div", { class: "hm-title" });
    this.canvas = el("canvas", { class: "hm-canvas" });
    this.outline = el("div", { class: "hm-outline", hidden: "" });
    this.tooltip = el("div", { class: "hm-tooltip", role: "tooltip", hidden: "" });
    this.yLabels = el("div", { class: "hm-ylabels", "aria-hidden": "true" });
    this.xLabels = el("div", { class: "hm-xlabels", "aria-hidden": "true" });
    this.colorbar = el("div", { class: "hm-colorbar" });
    const plot = el("div", { class: "hm-plot" }, this.canvas, this.outline, this.tooltip);
    container.replaceChildren(
      this.title,
      el(
        "div",
        { class: "hm-body" },
        el("div", { class: "hm-axis-title hm-y-title" }, "query: attending"),
        this.yLabels,
        plot,
        this.colorbar,
        el("span"),
        el("span"),
        this.xLabels,
      ),
      el("div", { class: "hm-axis-title" }, "key: attended to"),
    );
    container.heatmap = this; // what it shows stays inspectable from the page (and from the tests)
    this.canvas.addEventListener("mousemove", (event) => this.hover(event));
    this.canvas.addEventListener("mouseleave", () => (this.tooltip.hidden = true));
    this.canvas.addEventListener("click", (event) => {
      const cell = this.cellAt(event);
      if (cell) this.onSelect(cell.row);
    });
  }

  // matrix: Float32Array [query, key]; labels: token texts; selected: query row to outline, or null.
  draw({ matrix, labels, selected, title }) {
    const n = labels.length;
    this.matrix = matrix;
    this.labels = labels;
    this.n = n;
    this.zmax = matrix.reduce((max, value) => Math.max(max, value), 1e-9);
    // Whole pixels per cell while they fit, so every cell is drawn crisp; at most MAX_CELL.
    const room = Math.max(200, Math.min(SIDE, this.container.clientWidth - FRAME));
    this.cell = n <= room ? Math.min(MAX_CELL, Math.floor(room / n)) : room / n;
    const side = this.cell * n;
    this.title.textContent = title;
    this.paint(side);
    this.drawLabels(side);
    this.drawColorbar(side);
    this.select(selected);
    this.container.setAttribute("aria-label", `${title}: ${n} by ${n} attention weights`);
  }

  paint(side) {
    const n = this.n;
    const image = new ImageData(n, n);
    for (let cell = 0; cell < n * n; cell += 1) {
      const [r, g, b] = sequential(this.matrix[cell] / this.zmax);
      image.data[cell * 4] = r;
      image.data[cell * 4 + 1] = g;
      image.data[cell * 4 + 2] = b;
      image.data[cell * 4 + 3] = 255;
    }
    const source = el("canvas", { width: n, height: n });
    source.getContext("2d").putImageData(image, 0, 0);
    const ratio = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(side * ratio);
    this.canvas.height = Math.round(side * ratio);
    this.canvas.style.width = `${side}px`;
    this.canvas.style.height = `${side}px`;
    const context = this.canvas.getContext("2d");
    context.imageSmoothingEnabled = false;
    context.drawImage(source, 0, 0, this.canvas.width, this.canvas.height);
  }

  drawLabels(side) {
    const step = Math.max(1, Math.ceil(MIN_LABEL_GAP / this.cell));
    const shown = [];
    for (let index = 0; index < this.n; index += step) shown.push(index);
    const label = (index, axis) =>
      el("span", { style: `${axis}:${(index + 0.5) * this.cell}px`, title: `token ${index}` }, this.labels[index]);
    this.yLabels.style.height = `${side}px`;
    this.xLabels.style.width = `${side}px`;
    this.yLabels.replaceChildren(...shown.map((index) => label(index, "top")));
    this.xLabels.replaceChildren(...shown.map((index) => label(index, "left")));
  }

  drawColorbar(side) {
    this.colorbar.style.height = `${side}px`;
    this.colorbar.replaceChildren(
      el("span", { class: "hm-colorbar-max" }, fixed(this.zmax, 3)),
      el("span", { class: "hm-colorbar-ramp", style: `background:linear-gradient(${rgb(sequential(1))}, ${rgb(sequential(0))})` }),
      el("span", { class: "hm-colorbar-min" }, "0"),
    );
  }

  select(row) {
    if (!this.matrix) return;
    this.container.dataset.selectedRow = row === null ? "" : String(row);
    this.outline.hidden = row === null;
    if (row === null) return;
    // The outline reaches past the row by its border, so even a 1 px row at 512 tokens shows.
    this.outline.style.top = `${row * this.cell - 2}px`;
    this.outline.style.height = `${this.cell + 4}px`;
    this.outline.style.width = `${this.cell * this.n}px`;
  }

  cellAt(event) {
    const box = this.canvas.getBoundingClientRect();
    const col = Math.floor((event.clientX - box.left) / this.cell);
    const row = Math.floor((event.clientY - box.top) / this.cell);
    return row >= 0 && row < this.n && col >= 0 && col < this.n ? { row, col } : null;
  }

  hover(event) {
    const cell = this.cellAt(event);
    this.tooltip.hidden = !cell;
    if (!cell) return;
    const { row, col } = cell;
    this.tooltip.replaceChildren(
      el("span", {}, `query “${this.labels[row]}” (${row}) → key “${this.labels[col]}” (${col})`),
      el("br"),
      el("strong", {}, `A[${row},${col}] = ${fixed(this.matrix[row * this.n + col])}`),
    );
    this.tooltip.style.left = `${(col + 1) * this.cell + 8}px`;
    this.tooltip.style.top = `${(row + 1) * this.cell + 8}px`;
  }

  // A PNG of what is on screen, title and labels included, for class notes.
  toPNG() {
    const margin = { left: 110, top: 40, bottom: 110 };
    const side = SIDE;
    const cell = side / this.n;
    const canvas = el("canvas", { width: margin.left + side + 20, height: margin.top + side + margin.bottom });
    const context = canvas.getContext("2d");
    context.fillStyle = "#fff";
    context.fillRect(0, 0, canvas.width, canvas.height);
    context.imageSmoothingEnabled = false;
    context.drawImage(this.canvas, margin.left, margin.top, side, side);
    context.fillStyle = "#111";
    context.font = "16px sans-serif";
    context.fillText(this.title.textContent, 10, 24);
    context.font = "11px sans-serif";
    const step = Math.max(1, Math.ceil(MIN_LABEL_GAP / cell));
    for (let index = 0; index < this.n; index += step) {
      const middle = (index + 0.5) * cell;
      context.textAlign = "right";
      context.textBaseline = "middle";
      context.fillText(this.labels[index], margin.left - 6, margin.top + middle);
      context.save();
      context.translate(margin.left + middle, margin.top + side + 6);
      context.rotate(-Math.PI / 3);
      context.fillText(this.labels[index], 0, 0);
      context.restore();
    }
    return new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
  }
}
