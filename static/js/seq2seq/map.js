// One rectangular attention matrix on a canvas: rows are the tokens that look (the queries), columns the tokens
// looked at (the keys). Cross-attention has as many rows as the target and as many columns as the source, so
// the cells are square and the picture is not. Drawn at the screen's pixel density; a click or Enter selects a
// row's token; from the keyboard the plot is one tab stop whose arrows move a cursor cell printed in the readout.

import { gradient, sequential } from "../colors.js";
import { el, fixed } from "../format.js";
import { cellSymbol } from "../measures.js";

const MAX_CELL = 44; // px: a short pair is not blown up past this

export class PairMap {
  // bounds(): {width, height} the whole map may take; readout: the element printing the cursor's cell.
  constructor(container, onSelect, { bounds, readout }) {
    this.container = container;
    this.onSelect = onSelect;
    this.bounds = bounds;
    this.readout = readout;
    this.shown = null;
    this.cursor = null;
    this.title = el("div", { class: "hm-title" });
    this.canvas = el("canvas", { class: "hm-canvas" });
    this.outline = el("div", { class: "hm-outline", hidden: "" });
    this.cursorBox = el("div", { class: "hm-cursor", hidden: "" });
    this.yLabels = el("div", { class: "hm-ylabels", "aria-hidden": "true" });
    this.xLabels = el("div", { class: "hm-xlabels", "aria-hidden": "true" });
    this.colorbar = el("div", { class: "hm-colorbar", "aria-hidden": "true" });
    this.yTitle = el("div", { class: "hm-axis-title hm-y-title" });
    this.xTitle = el("div", { class: "hm-axis-title hm-x-title" });
    this.plot = el(
      "div",
      { class: "hm-plot", tabindex: "0", role: "application", "aria-roledescription": "heatmap", "aria-label": "Heatmap. Arrow keys move between cells, Enter selects the row's token.", "aria-describedby": readout.id },
      this.canvas,
      this.outline,
      this.cursorBox,
    );
    this.head = el("div", { class: "hm-head" }, this.title);
    this.body = el("div", { class: "hm-body" }, this.yTitle, this.yLabels, this.plot, this.colorbar, el("span"), this.xTitle, this.xLabels);
    container.replaceChildren(this.head, this.body);
    container.pairMap = this; // inspectable from the tests, as the one-text heatmap is
    this.canvas.addEventListener("click", (event) => {
      const cell = this.cellAt(event);
      if (!cell) return;
      this.onSelect(cell.row);
      this.cursor = cell;
      this.showCursor();
    });
    this.canvas.addEventListener("mousemove", (event) => {
      const cell = this.cellAt(event);
      if (cell) this.say(cell);
    });
    this.plot.addEventListener("keydown", (event) => this.key(event));
    this.plot.addEventListener("focus", () => this.showCursor());
    this.plot.addEventListener("blur", () => (this.cursorBox.hidden = true));
  }

  // shown: {values (rows × columns), rows, columns, rowLabels, columnLabels, rowsName, columnsName, title,
  // measure, scale, selected}.
  draw(shown) {
    if (this.shown?.rows !== shown.rows || this.shown?.columns !== shown.columns) this.cursor = null;
    this.shown = shown;
    this.body.style.display = "";
    this.zmax = shown.values.reduce((max, value) => Math.max(max, value), 1e-9);
    this.title.textContent = shown.title;
    this.title.title = shown.title;
    this.yTitle.textContent = `${shown.rowsName}: looking`;
    this.xTitle.textContent = `${shown.columnsName} →`;
    this.xTitle.title = `columns are ${shown.columnsName} tokens: the tokens looked at`;
    this.container.setAttribute("aria-label", `${shown.title}: ${shown.rows} ${shown.rowsName} rows by ${shown.columns} ${shown.columnsName} columns, each the ${shown.measure.name} of a query and a key.`);
    this.fit();
  }

  // Drawn with no numbers (a class votes blind, blind.js): the cells, labels and colour bar put away, the title
  // saying why; the next draw brings them back.
  blank(note) {
    this.shown = null;
    this.cursor = null;
    this.body.style.display = "none";
    this.title.textContent = note;
    this.title.title = note;
    this.readout.textContent = "";
  }

  // The cells as large as the bounds allow (square, whole pixels), drawn again whenever the bounds change.
  fit() {
    if (!this.shown) return;
    const { rows, columns } = this.shown;
    this.sizeLabels();
    const { width, height } = this.bounds();
    const body = this.body.getBoundingClientRect();
    const plot = this.plot.getBoundingClientRect();
    const frameWidth = Math.ceil(body.width - plot.width) + 4;
    const frameHeight = Math.ceil(this.head.offsetHeight + body.height - plot.height) + 4;
    const fits = Math.min((width - frameWidth) / columns, (height - frameHeight) / rows, MAX_CELL);
    // Whole pixels a cell while they fit, so that every cell is crisp; a long source takes less than a pixel a
    // cell rather than running past the stage (its labels thin out to every k-th).
    this.cell = fits >= 1 ? Math.floor(fits) : Math.max(fits, 0.1);
    this.paint();
  }

  // The label columns as wide as the widest label (a fifth of the width at most), as the one-text heatmap's.
  sizeLabels() {
    const { rowLabels, columnLabels } = this.shown;
    const style = getComputedStyle(this.yLabels);
    const probe = el("div", { style: `position:absolute;visibility:hidden;display:grid;width:max-content;white-space:pre;font:700 ${style.fontSize} ${style.fontFamily}` });
    probe.append(...[...new Set([...rowLabels, ...columnLabels])].map((label) => el("span", {}, label)));
    this.container.append(probe);
    const widest = probe.getBoundingClientRect().width;
    probe.remove();
    const rem = parseFloat(getComputedStyle(document.documentElement).fontSize);
    const longest = Math.min(Math.ceil(widest) + 1, Math.max(5 * rem, this.bounds().width / 5));
    const line = parseFloat(style.fontSize) * 1.2;
    this.body.style.setProperty("--hm-label", `${longest}px`);
    this.body.style.setProperty("--hm-ylabels", `${Math.max(longest + 0.7 * rem, 3.2 * rem)}px`);
    this.body.style.setProperty("--hm-xlabels", `${Math.max(Math.ceil(longest * Math.sin(Math.PI / 3) + line / 2 + 0.5 * rem), 2 * rem)}px`);
  }

  paint() {
    const { values, rows, columns, scale } = this.shown;
    const image = new ImageData(columns, rows);
    for (let index = 0; index < rows * columns; index += 1) image.data.set([...sequential(values[index] / this.zmax, scale), 255], index * 4);
    const source = el("canvas", { width: columns, height: rows });
    source.getContext("2d").putImageData(image, 0, 0);
    const ratio = window.devicePixelRatio || 1;
    const [width, height] = [this.cell * columns, this.cell * rows];
    Object.assign(this.canvas, { width: Math.round(width * ratio), height: Math.round(height * ratio) });
    Object.assign(this.canvas.style, { width: `${width}px`, height: `${height}px` });
    const context = this.canvas.getContext("2d");
    context.imageSmoothingEnabled = false;
    context.drawImage(source, 0, 0, this.canvas.width, this.canvas.height);
    this.yLabels.style.height = `${height}px`;
    this.xLabels.style.width = `${width}px`;
    this.colorbar.style.height = `${Math.max(height, 60)}px`;
    this.colorbar.title = `${this.shown.measure.name}: ${this.shown.measure.values}`;
    this.colorbar.replaceChildren(
      el("span", { class: "hm-colorbar-max" }, fixed(this.zmax, 3)),
      el("span", { class: "hm-colorbar-ramp", style: `background:${gradient(scale, "to top")}` }),
      el("span", { class: "hm-colorbar-min" }, "0"),
    );
    this.drawLabels();
    this.select(this.shown.selected);
  }

  // Every label while they are a line apart; else every k-th, and the selected row's always.
  drawLabels() {
    const gap = 1.1 * parseFloat(getComputedStyle(this.yLabels).fontSize);
    const step = Math.max(1, Math.ceil(gap / this.cell));
    const labels = (names, axis, pinned) =>
      names.flatMap((name, index) => {
        const keep = index === pinned || (index % step === 0 && (pinned === null || Math.abs(index - pinned) >= step));
        if (!keep) return [];
        const classes = index === pinned ? "pinned selected" : "";
        return [el("span", { class: classes, style: `${axis}:${(index + 0.5) * this.cell}px`, title: `token ${index}`, dataset: { index: String(index) } }, name)];
      });
    this.yLabels.replaceChildren(...labels(this.shown.rowLabels, "top", this.shown.selected));
    this.xLabels.replaceChildren(...labels(this.shown.columnLabels, "left", null));
  }

  select(row) {
    if (!this.shown) return;
    if (row !== this.shown.selected) this.cursor = null;
    this.shown.selected = row;
    this.container.dataset.selectedRow = row === null ? "" : String(row);
    this.outline.hidden = row === null;
    if (row !== null) Object.assign(this.outline.style, { top: `${row * this.cell - 2}px`, height: `${this.cell + 4}px`, width: `${this.cell * this.shown.columns}px` });
    this.drawLabels();
    this.showCursor();
  }

  cellAt(event) {
    if (!this.shown) return null;
    const box = this.canvas.getBoundingClientRect();
    const row = Math.floor((event.clientY - box.top) / this.cell);
    const col = Math.floor((event.clientX - box.left) / this.cell);
    return row >= 0 && row < this.shown.rows && col >= 0 && col < this.shown.columns ? { row, col } : null;
  }

  // The cursor's cell (or the selected row's strongest), boxed while the plot has the focus, and printed.
  showCursor() {
    const { selected, rows, columns, values } = this.shown;
    let cell = this.cursor;
    if (!cell && selected !== null && selected < rows) {
      let col = 0;
      for (let key = 1; key < columns; key += 1) if (values[selected * columns + key] > values[selected * columns + col]) col = key;
      cell = { row: selected, col };
    }
    const focused = this.plot.getRootNode().activeElement === this.plot;
    this.cursorBox.hidden = !(focused && cell);
    if (cell && focused) Object.assign(this.cursorBox.style, { left: `${cell.col * this.cell - 2}px`, top: `${cell.row * this.cell - 2}px`, width: `${this.cell + 4}px`, height: `${this.cell + 4}px` });
    this.container.dataset.cursor = this.cursor ? `${this.cursor.row},${this.cursor.col}` : "";
    if (cell) this.say(cell);
    else this.readout.textContent = "Select a token, or focus the heatmap and use the arrow keys.";
  }

  say({ row, col }) {
    const { values, columns, rowLabels, columnLabels, measure } = this.shown;
    this.readout.textContent = `${cellSymbol(measure, row, col)} = ${fixed(values[row * columns + col])}, “${rowLabels[row]}” → “${columnLabels[col]}”`;
  }

  key(event) {
    if (!this.shown) return;
    const { rows, columns, selected } = this.shown;
    const { row, col } = this.cursor ?? { row: selected ?? 0, col: 0 };
    const moves = { ArrowUp: [row - 1, col], ArrowDown: [row + 1, col], ArrowLeft: [row, col - 1], ArrowRight: [row, col + 1], Home: [row, 0], End: [row, columns - 1] };
    if (event.key === "Enter" || event.key === " ") {
      this.onSelect(row);
      this.cursor = { row, col };
    } else if (moves[event.key]) {
      const [r, c] = moves[event.key];
      this.cursor = { row: Math.max(0, Math.min(rows - 1, r)), col: Math.max(0, Math.min(columns - 1, c)) };
    } else return;
    event.preventDefault();
    event.stopPropagation();
    this.showCursor();
  }
}
