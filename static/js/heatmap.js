// One attention matrix drawn on a canvas: rows are queries (who looks), columns keys (who is looked at).
// A 512×512 matrix draws in milliseconds; selecting a token only moves the row outline. A long input
// zooms (wheel, + / − buttons) and pans (drag) through a square window of the matrix.

import { diverging, el, fixed, rgb, sequential } from "./format.js";

const SIDE = 560; // px of the square plot at most
const FRAME = 200; // px beside the plot: axis title, token labels, colour bar
const MAX_CELL = 40; // px: a 5-token matrix stays a readable size, not a wall
const MIN_LABEL_GAP = 13; // px between axis labels; beyond that they thin out
const MIN_WINDOW = 8; // tokens: the closest zoom
const DRAG_PX = 4; // a press that moves further pans instead of clicking
const BLANK = [225, 225, 225]; // a cell the view leaves out (a segment filter), distinct from a weight of 0

export class Heatmap {
  // options.signed: the matrix holds differences; colours diverge from white at zero.
  constructor(container, onSelect, { signed = false, valueName = "A" } = {}) {
    this.container = container;
    this.onSelect = onSelect;
    this.signed = signed;
    this.valueName = valueName;
    this.title = el("div", { class: "hm-title" });
    this.canvas = el("canvas", { class: "hm-canvas" });
    this.outline = el("div", { class: "hm-outline", hidden: "" });
    this.tooltip = el("div", { class: "hm-tooltip", role: "tooltip", hidden: "" });
    this.yLabels = el("div", { class: "hm-ylabels", "aria-hidden": "true" });
    this.xLabels = el("div", { class: "hm-xlabels", "aria-hidden": "true" });
    this.colorbar = el("div", { class: "hm-colorbar" });
    this.zoomLabel = el("span", { class: "hm-zoom-label" });
    const button = (label, name, action) => {
      const node = el("button", { type: "button", "aria-label": name, title: name, dataset: { zoom: label } }, label);
      node.addEventListener("click", action);
      return node;
    };
    const zoom = el(
      "div",
      { class: "hm-zoom", role: "group", "aria-label": "Zoom" },
      button("+", "Zoom in", () => this.zoom(2)),
      button("−", "Zoom out", () => this.zoom(0.5)),
      button("Reset", "Show the whole matrix", () => this.reset()),
      this.zoomLabel,
    );
    this.extraOutlines = el("div", { class: "hm-extra-outlines" });
    this.sinkColumn = el("canvas", { class: "hm-sink", hidden: "", title: "sink: the weight on hidden [CLS]/[SEP], per row" });
    this.sinkLabel = el("span", { class: "hm-sink-label", hidden: "" }, "sink");
    const plot = el(
      "div",
      { class: "hm-plot" },
      this.canvas,
      this.sinkColumn,
      this.sinkLabel,
      this.outline,
      this.extraOutlines,
      this.tooltip,
    );
    container.replaceChildren(
      el("div", { class: "hm-head" }, this.title, zoom),
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
    this.listen();
  }

  listen() {
    let press = null;
    this.canvas.addEventListener("mousemove", (event) => {
      if (press && Math.hypot(event.clientX - press.x, event.clientY - press.y) > DRAG_PX) {
        const rows = Math.round((press.y - event.clientY) / this.cell);
        const cols = Math.round((press.x - event.clientX) / this.cell);
        if (rows || cols) {
          this.pan(rows, cols);
          press = { ...press, x: event.clientX, y: event.clientY, moved: true };
        }
        return;
      }
      this.hover(event);
    });
    this.canvas.addEventListener("mousedown", (event) => (press = { x: event.clientX, y: event.clientY, moved: false }));
    window.addEventListener("mouseup", () => setTimeout(() => (press = null)));
    this.canvas.addEventListener("mouseleave", () => (this.tooltip.hidden = true));
    this.canvas.addEventListener("click", (event) => {
      const cell = this.cellAt(event);
      if (cell && !press?.moved) this.onSelect(cell.row);
    });
    this.canvas.addEventListener(
      "wheel",
      (event) => {
        const cell = this.cellAt(event);
        if (!cell) return;
        event.preventDefault();
        this.zoom(event.deltaY < 0 ? 2 : 0.5, cell);
      },
      { passive: false },
    );
  }

  // matrix: Float32Array [query, key]; labels: token texts; selected: query row to outline, or null.
  // The zoom window stays while the token count does (switching heads keeps the close-up).
  // sink: per query row, the weight taken off hidden special tokens, drawn as a column of its own.
  draw({ matrix, labels, selected, also = [], title, sink = null }) {
    this.also = also;
    this.sink = sink;
    const n = labels.length;
    if (n !== this.n) this.window = { row: 0, col: 0, size: n };
    this.matrix = matrix;
    this.labels = labels;
    this.n = n;
    this.selected = selected;
    // Blanked cells (NaN: outside a segment filter) take no part in the scale.
    this.zmax = matrix.reduce((max, value) => (Number.isNaN(value) ? max : Math.max(max, this.signed ? Math.abs(value) : value)), 1e-9);
    this.title.textContent = title;
    this.render();
    this.container.setAttribute("aria-label", `${title}: ${n} by ${n} ${this.signed ? "differences" : "attention weights"}`);
  }

  render() {
    const { size } = this.window;
    // Whole pixels per cell while they fit, so every cell is drawn crisp; at most MAX_CELL.
    const room = Math.max(200, Math.min(SIDE, this.container.clientWidth - FRAME));
    this.cell = size <= room ? Math.min(MAX_CELL, Math.floor(room / size)) : room / size;
    const side = this.cell * size;
    this.paint(side);
    this.paintSink(side);
    this.drawLabels(side);
    this.drawColorbar(side);
    this.select(this.selected, this.also);
    this.zoomLabel.textContent = size === this.n ? "" : `tokens ${this.window.row}–${this.window.row + size - 1} × ${this.window.col}–${this.window.col + size - 1}`;
    this.container.dataset.window = `${this.window.row},${this.window.col},${size}`;
  }

  colour(value) {
    if (Number.isNaN(value)) return BLANK;
    return this.signed ? diverging(value / this.zmax) : sequential(value / this.zmax);
  }

  paint(side) {
    const { row: row0, col: col0, size } = this.window;
    const image = new ImageData(size, size);
    for (let row = 0; row < size; row += 1) {
      for (let col = 0; col < size; col += 1) {
        const [r, g, b] = this.colour(this.matrix[(row0 + row) * this.n + col0 + col]);
        image.data.set([r, g, b, 255], (row * size + col) * 4);
      }
    }
    const source = el("canvas", { width: size, height: size });
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

  paintSink(side) {
    this.sinkColumn.hidden = this.sink === null;
    this.sinkLabel.hidden = this.sink === null;
    this.container.dataset.sink = this.sink === null ? "" : Array.from(this.sink).join(",");
    if (this.sink === null) return;
    const { row: row0, size } = this.window;
    const width = 12;
    this.sinkColumn.width = width;
    this.sinkColumn.height = Math.round(side);
    this.sinkColumn.style.left = `${side + 6}px`;
    this.sinkLabel.style.left = `${side + 2}px`;
    this.sinkColumn.style.height = `${side}px`;
    const context = this.sinkColumn.getContext("2d");
    for (let row = 0; row < size; row += 1) {
      context.fillStyle = rgb(sequential(this.sink[row0 + row]));
      context.fillRect(0, row * this.cell, width, Math.ceil(this.cell));
    }
  }

  // The window's token indices that get a label: every one, or every k-th when they would collide.
  labelled() {
    const { row, col, size } = this.window;
    const step = Math.max(1, Math.ceil(MIN_LABEL_GAP / this.cell));
    const offsets = [];
    for (let offset = 0; offset < size; offset += step) offsets.push(offset);
    return { rows: offsets.map((offset) => row + offset), cols: offsets.map((offset) => col + offset), offsets };
  }

  drawLabels(side) {
    const { rows, cols, offsets } = this.labelled();
    const label = (index, offset, axis) =>
      el("span", { style: `${axis}:${(offset + 0.5) * this.cell}px`, title: `token ${index}`, dataset: { index: String(index) } }, this.labels[index]);
    this.yLabels.style.height = `${side}px`;
    this.xLabels.style.width = `${side}px`;
    this.yLabels.replaceChildren(...rows.map((index, at) => label(index, offsets[at], "top")));
    this.xLabels.replaceChildren(...cols.map((index, at) => label(index, offsets[at], "left")));
  }

  drawColorbar(side) {
    const [top, bottom] = this.signed ? [diverging(1), diverging(-1)] : [sequential(1), sequential(0)];
    const middle = this.signed ? `, ${rgb(diverging(0))}` : "";
    this.colorbar.style.height = `${side}px`;
    this.colorbar.replaceChildren(
      el("span", { class: "hm-colorbar-max" }, fixed(this.zmax, 3)),
      el("span", { class: "hm-colorbar-ramp", style: `background:linear-gradient(${rgb(top)}${middle}, ${rgb(bottom)})` }),
      el("span", { class: "hm-colorbar-min" }, this.signed ? fixed(-this.zmax, 3) : "0"),
    );
  }

  // row: the query outlined; also: more queries of a multi-selection, outlined thinner.
  select(row, also = []) {
    if (!this.matrix) return;
    this.selected = row;
    this.also = also;
    this.container.dataset.selectedRow = row === null ? "" : String(row);
    this.container.dataset.alsoRows = also.join(",");
    this.place(this.outline, row);
    this.extraOutlines.replaceChildren(
      ...also.filter((other) => other !== row).map((other) => this.place(el("div", { class: "hm-outline also" }), other)),
    );
  }

  // The outline reaches past the row by its border, so even a 1 px row at 512 tokens shows.
  place(outline, row) {
    const { row: row0, size } = this.window;
    outline.hidden = row === null || row < row0 || row >= row0 + size;
    if (!outline.hidden) {
      outline.style.top = `${(row - row0) * this.cell - 2}px`;
      outline.style.height = `${this.cell + 4}px`;
      outline.style.width = `${this.cell * size}px`;
    }
    return outline;
  }

  // Zoom by `factor` (2: in, 0.5: out) around a cell (default: the selected token, or the middle).
  zoom(factor, around = null) {
    if (!this.matrix) return;
    const { row, col, size } = this.window;
    const centre = around ?? (this.selected === null ? { row: row + size / 2, col: col + size / 2 } : { row: this.selected, col: this.selected });
    const next = Math.max(Math.min(MIN_WINDOW, this.n), Math.min(this.n, Math.round(size / factor)));
    this.window = { size: next, row: this.clamp(Math.round(centre.row - next / 2), next), col: this.clamp(Math.round(centre.col - next / 2), next) };
    this.render();
  }

  pan(rows, cols) {
    const { row, col, size } = this.window;
    this.window = { size, row: this.clamp(row + rows, size), col: this.clamp(col + cols, size) };
    this.render();
  }

  reset() {
    if (!this.matrix) return;
    this.window = { row: 0, col: 0, size: this.n };
    this.render();
  }

  // Brings a token into view when zoomed in (a search hit, a token chosen elsewhere).
  reveal(index) {
    if (!this.matrix) return;
    const { row, col, size } = this.window;
    if (size === this.n || (index >= row && index < row + size && index >= col && index < col + size)) return;
    this.window = { size, row: this.clamp(index - Math.floor(size / 2), size), col: this.clamp(index - Math.floor(size / 2), size) };
    this.render();
  }

  clamp(start, size) {
    return Math.max(0, Math.min(this.n - size, start));
  }

  cellAt(event) {
    const box = this.canvas.getBoundingClientRect();
    const col = Math.floor((event.clientX - box.left) / this.cell);
    const row = Math.floor((event.clientY - box.top) / this.cell);
    const { size } = this.window;
    return row >= 0 && row < size && col >= 0 && col < size ? { row: this.window.row + row, col: this.window.col + col } : null;
  }

  hover(event) {
    const cell = this.cellAt(event);
    this.tooltip.hidden = !cell;
    if (!cell) return;
    const { row, col } = cell;
    this.tooltip.replaceChildren(
      el("span", {}, `query “${this.labels[row]}” (${row}) → key “${this.labels[col]}” (${col})`),
      el("br"),
      el(
        "strong",
        {},
        Number.isNaN(this.matrix[row * this.n + col])
          ? `left out of this view${this.sink ? `; sink for this row: ${fixed(this.sink[row])}` : ""}`
          : `${this.valueName}[${row},${col}] = ${fixed(this.matrix[row * this.n + col])}`,
      ),
    );
    this.tooltip.style.left = `${(col - this.window.col + 1) * this.cell + 8}px`;
    this.tooltip.style.top = `${(row - this.window.row + 1) * this.cell + 8}px`;
  }

  // What is on screen as a picture with its title and labels, drawn by `painter` (canvas or SVG).
  layout() {
    const margin = { left: 110, top: 40, bottom: 110, right: 20 };
    const { size } = this.window;
    const cell = SIDE / size;
    const step = Math.max(1, Math.ceil(MIN_LABEL_GAP / cell));
    const labels = [];
    for (let offset = 0; offset < size; offset += step) {
      labels.push({ row: this.window.row + offset, col: this.window.col + offset, middle: (offset + 0.5) * cell });
    }
    return { margin, side: SIDE, labels, width: margin.left + SIDE + margin.right, height: margin.top + SIDE + margin.bottom };
  }

  toPNG() {
    const { margin, side, labels, width, height } = this.layout();
    const canvas = el("canvas", { width, height });
    const context = canvas.getContext("2d");
    context.fillStyle = "#fff";
    context.fillRect(0, 0, width, height);
    context.imageSmoothingEnabled = false;
    context.drawImage(this.canvas, margin.left, margin.top, side, side);
    context.fillStyle = "#111";
    context.font = "16px sans-serif";
    context.fillText(this.title.textContent, 10, 24);
    context.font = "11px sans-serif";
    for (const { row, col, middle } of labels) {
      context.textAlign = "right";
      context.textBaseline = "middle";
      context.fillText(this.labels[row], margin.left - 6, margin.top + middle);
      context.save();
      context.translate(margin.left + middle, margin.top + side + 6);
      context.rotate(-Math.PI / 3);
      context.fillText(this.labels[col], 0, 0);
      context.restore();
    }
    return new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
  }

  // An SVG: the cells as one embedded image, the title and token labels as text (escaped).
  toSVG() {
    const { margin, side, labels, width, height } = this.layout();
    const text = (value) => value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
    const parts = [
      `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif">`,
      `<rect width="${width}" height="${height}" fill="#fff"/>`,
      `<text x="10" y="24" font-size="16">${text(this.title.textContent)}</text>`,
      `<image x="${margin.left}" y="${margin.top}" width="${side}" height="${side}" preserveAspectRatio="none" style="image-rendering:pixelated" href="${this.canvas.toDataURL("image/png")}"/>`,
      ...labels.map(
        ({ row, middle }) => `<text x="${margin.left - 6}" y="${margin.top + middle}" font-size="11" text-anchor="end" dominant-baseline="middle">${text(this.labels[row])}</text>`,
      ),
      ...labels.map(
        ({ col, middle }) => `<text font-size="11" text-anchor="end" transform="translate(${margin.left + middle},${margin.top + side + 6}) rotate(-60)">${text(this.labels[col])}</text>`,
      ),
      "</svg>",
    ];
    return new Blob([parts.join("\n")], { type: "image/svg+xml" });
  }
}
