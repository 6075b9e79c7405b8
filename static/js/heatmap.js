// One attention matrix drawn on a canvas: rows are queries (who looks), columns keys (who is looked at).
// The square is as large as its bounds allow and is drawn at the screen's pixel density, so it stays crisp
// on a projector or a phone. Selecting a token only moves the row outline. A long input zooms (wheel,
// + / − buttons) and pans (drag). From the keyboard the plot is one tab stop: the arrows move a cursor
// cell whose value is printed in the readout (a live region), Enter selects that row's token.
// A long run (data.js's LONG_FROM) is never held whole: the heatmap draws its overview max-pooled by the
// server, fetches the cells of each window it zooms or pans to (exact once the window is at most LONG_FROM
// tokens a side), and shows only exact numbers: the tooltip and the cursor read a window's exact cells or
// fetch the query's exact row.

import { diverging, gradient, rgb, sequential } from "./colors.js";
import { framedPicture, pngOf } from "./export.js";
import { el, fixed } from "./format.js";
import { cellSymbol, measureOf } from "./measures.js";

const MAX_SIDE = 560; // px: the square at most, unless its bounds say otherwise
const MIN_SIDE = 120; // px: below this the labels would be all there is
const MIN_LABEL_GAP = 13; // px between axis labels; beyond that they thin out
const MIN_WINDOW = 8; // tokens: the closest zoom
const DRAG_PX = 4; // a press that moves further pans instead of clicking
const PAGE_ROWS = 8; // PageUp / PageDown
const BLANK = [225, 225, 225]; // a cell the view leaves out (a segment filter), distinct from a weight of 0
const JUMP_WINDOW = 128; // tokens a side at most shown around a token jumped to in a long run: exact cells
const JUMP_CELL = 4; // px a cell at least, there: a window fewer tokens a side on a small square
const KEPT_ROWS = 64; // a long run's exact rows kept for the tooltip and the cursor
const FETCH_DELAY = 60; // ms a long run's window waits while a drag pans it: the drag asks once it pauses

export class Heatmap {
  // options.signed: the matrix holds differences; colours diverge from white at zero.
  // options.measure: what a cell's number is (measures.js), until a draw says otherwise.
  // options.bounds(): {width, height} the whole heatmap may take, frame included (default: the
  //   container's width, and MAX_SIDE for the square). options.readout: an element that prints the cursor
  //   cell (a live region).
  constructor(container, onSelect, { signed = false, measure = measureOf("weights"), bounds = null, readout = null } = {}) {
    this.container = container;
    this.onSelect = onSelect;
    this.signed = signed;
    this.measure = measure;
    this.bounds = bounds ?? (() => ({ width: container.clientWidth, height: Infinity }));
    this.readout = readout;
    this.scale = "blues";
    this.cursor = null; // {row, col}: the keyboard's cell
    this.title = el("div", { class: "hm-title" });
    this.canvas = el("canvas", { class: "hm-canvas" });
    this.outline = el("div", { class: "hm-outline", hidden: "" });
    this.cursorBox = el("div", { class: "hm-cursor", hidden: "" });
    this.answerBox = el("div", { class: "hm-answer", hidden: "" }); // a class question's revealed answer
    this.answer = null;
    this.tooltip = el("div", { class: "hm-tooltip", role: "tooltip", hidden: "" });
    this.yLabels = el("div", { class: "hm-ylabels", "aria-hidden": "true" });
    this.xLabels = el("div", { class: "hm-xlabels", "aria-hidden": "true" });
    this.colorbar = el("div", { class: "hm-colorbar", "aria-hidden": "true" });
    this.zoomLabel = el("span", { class: "hm-zoom-label" });
    this.matrix = null; // [query, key] values of a run held whole
    this.long = null; // a long run's source: {n, overview, zmax, window(win), row(r)} (attention.js)
    this.picture = null; // what a long run's canvas shows: {values, shape, window, pooling}
    this.rows = new Map(); // a long run's exact rows, fetched for the tooltip and the cursor
    // Jump to a token's passage: a window of JUMP_WINDOW tokens around it (long runs).
    this.goto = el("input", { type: "number", min: "0", class: "hm-goto", "aria-label": "Go to token", title: "Go to token: show its passage", placeholder: "token #" });
    this.goto.addEventListener("change", () => {
      const index = Number(this.goto.value);
      if (this.goto.value !== "" && Number.isInteger(index) && index >= 0 && index < this.n) this.jump(index);
    });
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
      button("Reset", "Reset: show the whole matrix", () => this.reset()),
      this.goto,
      this.zoomLabel,
    );
    this.extraOutlines = el("div", { class: "hm-extra-outlines" });
    this.sinkColumn = el("canvas", { class: "hm-sink", hidden: "" });
    this.sinkLabel = el("span", { class: "hm-sink-label", hidden: "" }, "sink");
    this.plot = el(
      "div",
      {
        class: "hm-plot",
        tabindex: "0",
        role: "application",
        "aria-roledescription": "heatmap",
        "aria-label": "Heatmap. Arrow keys move between cells, Enter selects the row's token.",
        ...(readout?.id ? { "aria-describedby": readout.id } : {}),
      },
      this.canvas,
      this.sinkColumn,
      this.sinkLabel,
      this.outline,
      this.extraOutlines,
      this.answerBox,
      this.cursorBox,
      this.tooltip,
    );
    this.head = el("div", { class: "hm-head" }, this.title, zoom);
    this.body = el(
      "div",
      { class: "hm-body" },
      el("div", { class: "hm-axis-title hm-y-title" }, "query: attending"),
      this.yLabels,
      this.plot,
      this.colorbar,
      el("span"),
      el("div", { class: "hm-axis-title hm-x-title", title: "columns are keys: the tokens attended to" }, "key →"),
      this.xLabels,
    );
    container.replaceChildren(this.head, this.body);
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
      const cell = this.ready ? this.cellAt(event) : null;
      if (!cell || press?.moved) return;
      this.onSelect(cell.row);
      this.cursor = cell; // after the selection, which starts the cursor afresh on its row
      this.showCursor();
    });
    this.canvas.addEventListener(
      "wheel",
      (event) => {
        const cell = this.ready ? this.cellAt(event) : null;
        if (!cell) return;
        event.preventDefault();
        this.zoom(event.deltaY < 0 ? 2 : 0.5, cell);
      },
      { passive: false },
    );
    this.plot.addEventListener("keydown", (event) => this.key(event));
    this.plot.addEventListener("focus", () => {
      if (this.ready && this.cursor === null) this.cursor = this.startCell();
      this.showCursor();
    });
    this.plot.addEventListener("blur", () => (this.cursorBox.hidden = true));
  }

  // The keyboard's cursor: arrows move it a cell, PageUp/PageDown a page of rows, Home/End to the row's
  // ends; Enter or Space selects its row's token.
  key(event) {
    if (!this.ready) return;
    const { row, col } = this.cursor ?? this.startCell();
    const moves = {
      ArrowUp: [row - 1, col],
      ArrowDown: [row + 1, col],
      ArrowLeft: [row, col - 1],
      ArrowRight: [row, col + 1],
      PageUp: [row - PAGE_ROWS, col],
      PageDown: [row + PAGE_ROWS, col],
      Home: [row, 0],
      End: [row, this.n - 1],
    };
    if (event.key === "Enter" || event.key === " ") {
      this.onSelect(row);
      this.cursor = { row, col };
    } else if (moves[event.key]) {
      const [nextRow, nextCol] = moves[event.key].map((index) => Math.max(0, Math.min(this.n - 1, index)));
      this.cursor = { row: nextRow, col: nextCol };
      this.revealCell(this.cursor);
    } else return;
    event.preventDefault();
    event.stopPropagation(); // the page's own arrow keys move the token selection
    this.showCursor();
  }

  get ready() {
    return this.matrix !== null || this.long !== null;
  }

  // Where the cursor starts: the selected row, at the key it attends to most (a long run's row once it has
  // come: until then its first key).
  startCell() {
    const row = this.selected ?? 0;
    if (this.long && !this.rows.has(row)) {
      this.needRow(row, () => this.showCursor());
      return { row, col: 0 };
    }
    let col = 0;
    for (let key = 1; key < this.n; key += 1) {
      const value = this.value(row, key);
      if (!(this.value(row, col) >= value)) col = Number.isNaN(value) ? col : key;
    }
    return { row, col };
  }

  // A cell's exact value, or undefined where a long run has not fetched it yet (needRow).
  value(row, col) {
    if (this.matrix) return this.matrix[row * this.n + col];
    const known = this.rows.get(row);
    if (known) return known[col];
    const shown = this.picture;
    if (!shown || shown.pooling) return undefined;
    const [row0, row1, col0, col1] = shown.window;
    return row >= row0 && row < row1 && col >= col0 && col < col1 ? shown.values[(row - row0) * (col1 - col0) + col - col0] : undefined;
  }

  // A long run's exact row of one query, fetched once (the most recent KEPT_ROWS kept); then() once it is here.
  needRow(row, then = () => {}) {
    if (!this.long || this.rows.has(row)) return;
    const source = this.long;
    source.row(row).then((values) => {
      if (this.long !== source) return;
      this.rows.set(row, values);
      while (this.rows.size > KEPT_ROWS) this.rows.delete(this.rows.keys().next().value);
      then();
    }, () => {});
  }

  // The cursor's (or, without one, the selected row's strongest) cell, boxed on the plot when the plot has
  // the focus, and printed in the readout.
  showCursor() {
    this.drawLabels();
    const cell = this.cursor ?? (this.selected === null ? null : this.startCell());
    const focused = this.plot.getRootNode().activeElement === this.plot;
    const { row: row0, col: col0, size } = this.window ?? { row: 0, col: 0, size: 0 };
    const inside = cell && cell.row >= row0 && cell.row < row0 + size && cell.col >= col0 && cell.col < col0 + size;
    this.cursorBox.hidden = !(focused && inside && this.cursor);
    if (!this.cursorBox.hidden) {
      Object.assign(this.cursorBox.style, {
        left: `${(cell.col - col0) * this.cell - 2}px`,
        top: `${(cell.row - row0) * this.cell - 2}px`,
        width: `${this.cell + 4}px`,
        height: `${this.cell + 4}px`,
      });
    }
    this.container.dataset.cursor = this.cursor ? `${this.cursor.row},${this.cursor.col}` : "";
    if (this.readout) this.readout.textContent = cell ? this.describe(cell) : "Select a token, or focus the heatmap and use the arrow keys.";
  }

  describe({ row, col }) {
    const value = this.value(row, col);
    const where = `“${this.labels[row]}” → “${this.labels[col]}”`;
    if (value === undefined) {
      this.needRow(row, () => this.showCursor());
      return `${cellSymbol(this.measure, row, col)}: fetching the exact value, ${where}`;
    }
    if (Number.isNaN(value)) return `${cellSymbol(this.measure, row, col)}: left out of this view, ${where}`;
    return `${cellSymbol(this.measure, row, col)} = ${fixed(value)}, ${where}`;
  }

  // matrix: Float32Array [query, key]; labels: token texts; selected: query row to outline, or null.
  // The zoom window stays while the token count does (switching heads keeps the close-up).
  // sink: per query row, what the hidden special tokens held (measure.sink), drawn as a column of its own.
  // caption: a line under the title in exported pictures (the prompt); scale: a colors.js scale name.
  // sinkNames: what the sink holds, e.g. "[CLS]+[SEP]". measure: what the numbers are (measures.js): the
  // title, the numbers and their name change together, so no picture is ever shown under another's name.
  // long: instead of `matrix`, a long run's source, {n, overview, zmax, window({row, col, size}), row(r)}:
  // its overview pooled by the server, and the fetches of a window's cells and of a query's exact row.
  draw({ matrix = null, long = null, labels, selected, also = [], title, sink = null, sinkNames = "", caption = "", scale = "blues", measure = this.measure }) {
    this.measure = measure;
    this.sinkColumn.title = `sink, per row: ${measure.sink} (${sinkNames})`;
    this.also = also;
    this.sink = sink;
    this.caption = caption;
    this.scale = scale;
    const n = labels.length;
    if (n !== this.n) {
      this.window = { row: 0, col: 0, size: n };
      this.cursor = null;
    }
    this.matrix = matrix;
    this.leavesOut = matrix !== null && matrix.some(Number.isNaN); // a filter blanks cells: the readout may say so
    this.long = long;
    this.picture = long ? long.overview : null;
    this.rows = new Map();
    this.goto.hidden = long === null;
    this.container.classList.toggle("hm-long", long !== null);
    this.goto.max = String(n - 1);
    this.labels = labels;
    this.n = n;
    this.selected = selected;
    // Blanked cells (NaN: outside a segment filter) take no part in the scale. A long run's largest value is
    // its max-pooled overview's.
    this.zmax = long ? long.zmax : matrix.reduce((max, value) => (Number.isNaN(value) ? max : Math.max(max, this.signed ? Math.abs(value) : value)), 1e-9);
    this.baseTitle = title;
    this.retitle();
    this.side = null;
    this.fit();
    this.container.setAttribute("aria-label", `${title}: ${n} by ${n} cells, each the ${measure.name} of a query and a key (${measure.values}).`);
  }

  // The largest square the bounds leave once the frame (title, labels, colour bar) is taken off. Drawn
  // again only when that changes: a ResizeObserver calls this on every resize.
  fit() {
    const { width, height } = this.bounds();
    this.sizeLabels(width);
    const frame = this.frame();
    const room = Math.floor(Math.min(width - frame.width, height - frame.height, Number.isFinite(height) ? Infinity : MAX_SIDE));
    const side = Math.max(MIN_SIDE, room);
    if (side === this.side && window.devicePixelRatio === this.ratio) return;
    this.side = side;
    if (this.ready) this.render();
    else this.reserve(side);
  }

  // The label columns as wide as the widest label, so that no tick label is cut: the y labels' column, and
  // the height the x labels take turned 60°. At most a fifth of the width (5 rem where that is less): past
  // that a label ends in "…" (a piece longer than a word, which a square of a few hundred pixels could not
  // spare the room for). Measured in the labels' own (bold, for a pinned one) type.
  sizeLabels(width) {
    if (!this.labels) return;
    const style = getComputedStyle(this.yLabels);
    const font = `${style.fontSize} ${style.fontFamily}`;
    if (this.labelFont !== font || this.labelsMeasured !== this.labels) {
      // One hidden column of every label, laid out once: its width is the widest.
      const probe = el("div", { style: `position:absolute;visibility:hidden;display:grid;width:max-content;white-space:pre;font:700 ${font}` });
      probe.append(...[...new Set(this.labels)].map((label) => el("span", {}, label)));
      this.container.append(probe);
      this.widestLabel = probe.getBoundingClientRect().width;
      const spans = [...probe.children];
      this.longestLabel = spans.reduce((best, span) => (span.offsetWidth > best.offsetWidth ? span : best), spans[0]).textContent;
      probe.remove();
      [this.labelFont, this.labelsMeasured] = [font, this.labels];
    }
    const rem = parseFloat(getComputedStyle(document.documentElement).fontSize);
    const longest = Math.min(Math.ceil(this.widestLabel) + 1, Math.max(5 * rem, width / 5));
    const line = parseFloat(style.fontSize) * 1.2;
    this.body.style.setProperty("--hm-label", `${longest}px`);
    this.body.style.setProperty("--hm-ylabels", `${Math.max(longest + 0.7 * rem, 3.2 * rem)}px`);
    this.body.style.setProperty("--hm-xlabels", `${Math.max(Math.ceil(longest * Math.sin(Math.PI / 3) + line / 2 + 0.5 * rem), 2 * rem)}px`);
    this.sizeReadout();
  }

  // The readout keeps two lines where its longest line (two of the longest labels, the widest cell symbol and
  // the longest value it can read: a number, "left out of this view" where the view blanks cells, or a long
  // run's "fetching the exact value") would not fit in one, else one: it never grows under the pointer, which
  // would move the heatmap, and never cuts a cell's words.
  sizeReadout() {
    if (!this.readout) return;
    const value = this.long ? ": fetching the exact value" : this.leavesOut ? ": left out of this view" : " = -0.0000";
    const longest = `${cellSymbol(this.measure, this.n - 1, this.n - 1)}${value}, “${this.longestLabel}” → “${this.longestLabel}”`;
    const style = getComputedStyle(this.readout);
    const probe = el("span", { style: `position:absolute;visibility:hidden;white-space:pre;font:${style.fontSize} ${style.fontFamily}` }, longest);
    this.container.append(probe);
    const need = probe.getBoundingClientRect().width;
    probe.remove();
    this.readout.classList.toggle("two-lines", need > this.readout.clientWidth);
  }

  // Before there is a matrix, the frame takes its place already, so drawing it shifts nothing.
  reserve(side) {
    Object.assign(this.canvas.style, { width: `${side}px`, height: `${side}px` });
    this.yLabels.style.height = `${side}px`;
    this.xLabels.style.width = `${side}px`;
    this.colorbar.style.height = `${side}px`;
  }

  // What the heatmap needs beside and below its square: measured, since it is set in rem.
  frame() {
    const plot = this.plot.getBoundingClientRect();
    const body = this.body.getBoundingClientRect();
    return {
      width: Math.ceil(body.width - plot.width) + 4,
      height: Math.ceil(this.head.offsetHeight + body.height - plot.height) + 4,
    };
  }

  render() {
    const { size } = this.window;
    // Whole pixels per cell while they fit, so every cell is drawn crisp; but not at the price of a quarter of
    // the square (a window of 128 tokens in 250 px would be drawn 128 px wide with 1 px cells).
    const room = this.side;
    const whole = Math.floor(room / size);
    this.cell = whole >= 1 && whole * size >= 0.75 * room ? whole : room / size;
    const side = this.cell * size;
    if (this.long) this.paintLong(side);
    else this.paint(side);
    this.paintSink(side);
    this.drawColorbar(side);
    this.select(this.selected, this.also);
    this.mark(this.answer);
    this.zoomLabel.textContent = size === this.n ? "" : `tokens ${this.window.row}–${this.window.row + size - 1} × ${this.window.col}–${this.window.col + size - 1}`;
    this.container.dataset.window = `${this.window.row},${this.window.col},${size}`;
  }

  // The title, and for a long run what its cells are: exact, or the server's max-pooled bins.
  retitle() {
    const shown = this.long ? this.picture : null;
    const rows = shown ? shown.window[1] - shown.window[0] : 0;
    const bin = shown ? Math.ceil(rows / shown.shape[shown.shape.length - 2]) : 1;
    const note = !shown ? "" : shown.pooling ? ` · max-pooled: a cell is the largest of ${bin}×${bin} (zoom in: exact)` : " · exact cells";
    this.title.textContent = `${this.baseTitle}${note}`;
    this.title.title = this.title.textContent; // the whole title, where a narrow column cuts it short
    this.container.dataset.picture = shown ? (shown.pooling ?? "exact") : "";
  }

  // A long run's window: the picture that covers it (the overview for the whole matrix), or, until the
  // window's cells have come, the picture before it, left as it is.
  paintLong(side) {
    const { row, col, size } = this.window;
    const covers = (shown) => shown && shown.window.join(",") === `${row},${row + size},${col},${col + size}`;
    if (covers(this.picture)) {
      this.paintPicture(this.picture, side);
      return;
    }
    if (size === this.n) {
      this.picture = this.long.overview;
      this.retitle();
      this.paintPicture(this.picture, side);
      return;
    }
    clearTimeout(this.fetching);
    const source = this.long;
    this.container.dataset.loading = "window";
    const load = () => {
      source.window(this.window).then(
        (shown) => {
          if (this.long !== source || !covers(shown) || shown.window.join(",") !== `${this.window.row},${this.window.row + this.window.size},${this.window.col},${this.window.col + this.window.size}`) return;
          delete this.container.dataset.loading;
          this.picture = shown;
          this.retitle();
          this.paintPicture(shown, this.cell * this.window.size);
          this.showCursor();
        },
        () => delete this.container.dataset.loading,
      );
    };
    if (this.panning) this.fetching = setTimeout(load, FETCH_DELAY);
    else load();
  }

  // A picture's cells ([rows, cols] of its shape's last two) stretched over the square.
  paintPicture(shown, side) {
    const [rows, cols] = shown.shape.slice(-2);
    this.paintValues((row, col) => shown.values[row * cols + col], rows, cols, side);
  }

  colour(value) {
    if (Number.isNaN(value)) return BLANK;
    return this.signed ? diverging(value / this.zmax) : sequential(value / this.zmax, this.scale);
  }

  paint(side) {
    const { row: row0, col: col0, size } = this.window;
    this.paintValues((row, col) => this.matrix[(row0 + row) * this.n + col0 + col], size, size, side);
  }

  // rows × cols values, value(row, col), drawn as cells over a side × side square.
  paintValues(value, rows, cols, side) {
    const image = new ImageData(cols, rows);
    for (let row = 0; row < rows; row += 1) {
      for (let col = 0; col < cols; col += 1) {
        const [r, g, b] = this.colour(value(row, col));
        image.data.set([r, g, b, 255], (row * cols + col) * 4);
      }
    }
    const source = el("canvas", { width: cols, height: rows });
    source.getContext("2d").putImageData(image, 0, 0);
    this.ratio = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(side * this.ratio);
    this.canvas.height = Math.round(side * this.ratio);
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
      context.fillStyle = rgb(sequential(this.sink[row0 + row], this.scale));
      context.fillRect(0, row * this.cell, width, Math.ceil(this.cell));
    }
  }

  // The window's token indices that get a label on one axis: every one, or every k-th when they would
  // collide; the pinned ones (the selected row, the readout's cell; in that order where two would collide)
  // always, with the sampled labels too close to them left out, so an outline never sits beside another
  // token's label.
  labelled(start, pinned) {
    const { size } = this.window;
    const gap = Math.max(MIN_LABEL_GAP, 1.1 * parseFloat(getComputedStyle(this.yLabels).fontSize)); // larger type, fewer labels
    const step = Math.max(1, Math.ceil(gap / this.cell));
    const kept = [];
    for (const index of pinned) {
      const inside = index !== null && index >= start && index < start + size;
      if (inside && kept.every((other) => Math.abs(other - index) >= step)) kept.push(index);
    }
    const sampled = [];
    for (let index = start; index < start + size; index += step) {
      if (kept.every((other) => Math.abs(other - index) >= step)) sampled.push(index);
    }
    return [...sampled, ...kept].sort((a, b) => a - b).map((index) => ({ index, pinned: kept.includes(index) }));
  }

  // Labels follow the selection and the cursor: the selected row's label and the readout's cell's column
  // are always there, even when only every k-th token gets one (a long input).
  drawLabels() {
    if (!this.ready) return;
    const { row, col, size } = this.window;
    const side = this.cell * size;
    const cell = this.cursor ?? (this.selected === null ? null : this.startCell());
    const label = (index, pinned, start, axis) =>
      el(
        "span",
        { class: `${pinned ? "pinned" : ""}${axis === "top" && index === this.selected ? " selected" : ""}`, style: `${axis}:${(index - start + 0.5) * this.cell}px`, title: `token ${index}`, dataset: { index: String(index) } },
        this.labels[index],
      );
    this.yLabels.style.height = `${side}px`;
    this.xLabels.style.width = `${side}px`;
    const rows = this.labelled(row, [this.selected, cell?.row ?? null, ...this.also]);
    const cols = this.labelled(col, [cell?.col ?? null]);
    this.yLabels.replaceChildren(...rows.map(({ index, pinned }) => label(index, pinned, row, "top")));
    this.xLabels.replaceChildren(...cols.map(({ index, pinned }) => label(index, pinned, col, "left")));
  }

  rampStyle() {
    return this.signed ? `linear-gradient(${rgb(diverging(1))}, ${rgb(diverging(0))}, ${rgb(diverging(-1))})` : gradient(this.scale, "to top");
  }

  drawColorbar(side) {
    this.colorbar.style.height = `${side}px`;
    this.colorbar.title = `${this.measure.name}: ${this.measure.values}`;
    this.colorbar.replaceChildren(
      el("span", { class: "hm-colorbar-max" }, fixed(this.zmax, 3)),
      el("span", { class: "hm-colorbar-ramp", style: `background:${this.rampStyle()}` }),
      el("span", { class: "hm-colorbar-min" }, this.signed ? fixed(-this.zmax, 3) : "0"),
    );
  }

  // row: the query outlined; also: more queries of a multi-selection, outlined thinner. A new selection
  // moves the cursor to that row's strongest key.
  select(row, also = []) {
    if (!this.ready) return;
    if (row !== this.selected) this.cursor = null;
    if (row !== null) this.needRow(row, () => this.showCursor()); // a long run's row, for the cursor's start
    this.selected = row;
    this.also = also;
    this.container.dataset.selectedRow = row === null ? "" : String(row);
    this.container.dataset.alsoRows = also.join(",");
    this.place(this.outline, row);
    this.extraOutlines.replaceChildren(
      ...also.filter((other) => other !== row).map((other) => this.place(el("div", { class: "hm-outline also" }), other)),
    );
    this.showCursor();
  }

  // One cell outlined as an answer ({row, col}), or none (null).
  mark(cell) {
    this.answer = cell;
    const { row: row0, col: col0, size } = this.window ?? { row: 0, col: 0, size: 0 };
    this.answerBox.hidden = !this.ready || !cell || cell.row < row0 || cell.row >= row0 + size || cell.col < col0 || cell.col >= col0 + size;
    this.container.dataset.answer = this.answerBox.hidden ? "" : `${cell.row},${cell.col}`;
    if (this.answerBox.hidden) return;
    Object.assign(this.answerBox.style, {
      left: `${(cell.col - col0) * this.cell - 3}px`,
      top: `${(cell.row - row0) * this.cell - 3}px`,
      width: `${this.cell + 6}px`,
      height: `${this.cell + 6}px`,
    });
  }

  // Drawn with no numbers (a class votes blind): an empty square in the same frame, no colour bar, no
  // outline, nothing in the readout. The next draw fills it again.
  blank() {
    this.matrix = null;
    this.long = null;
    this.picture = null;
    this.selected = null;
    this.cursor = null;
    const context = this.canvas.getContext("2d");
    context.clearRect(0, 0, this.canvas.width, this.canvas.height);
    this.colorbar.replaceChildren();
    this.yLabels.replaceChildren(); // the run may change before the reveal: no labels of another input
    this.xLabels.replaceChildren();
    for (const node of [this.outline, this.cursorBox, this.tooltip, this.sinkColumn, this.sinkLabel, this.answerBox]) node.hidden = true;
    this.extraOutlines.replaceChildren();
    this.container.dataset.selectedRow = "";
    this.container.dataset.answer = "";
    if (this.readout) this.readout.textContent = "";
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
    if (!this.ready) return;
    const { row, col, size } = this.window;
    const centre = around ?? (this.selected === null ? { row: row + size / 2, col: col + size / 2 } : { row: this.selected, col: this.selected });
    const next = Math.max(Math.min(MIN_WINDOW, this.n), Math.min(this.n, Math.round(size / factor)));
    this.window = { size: next, row: this.clamp(Math.round(centre.row - next / 2), next), col: this.clamp(Math.round(centre.col - next / 2), next) };
    this.render();
  }

  pan(rows, cols) {
    if (!this.ready) return;
    const { row, col, size } = this.window;
    this.window = { size, row: this.clamp(row + rows, size), col: this.clamp(col + cols, size) };
    this.panning = true;
    this.render();
    this.panning = false;
  }

  reset() {
    if (!this.ready) return;
    this.window = { row: 0, col: 0, size: this.n };
    this.render();
  }

  // Brings a token into view when zoomed in (a search hit, a token chosen elsewhere).
  reveal(index) {
    this.revealCell({ row: index, col: index });
  }

  // A long run's passage around a token (a search hit, a token typed in "Go to token"): a window of
  // JUMP_WINDOW tokens, its exact cells, with the token's row in its middle.
  jump(index) {
    if (!this.ready) return;
    const fits = Math.max(MIN_WINDOW, Math.floor(this.side / JUMP_CELL));
    const size = Math.min(this.n, this.long ? Math.min(JUMP_WINDOW, fits) : this.window.size);
    this.window = { size, row: this.clamp(index - Math.floor(size / 2), size), col: this.clamp(index - Math.floor(size / 2), size) };
    this.render();
  }

  revealCell({ row: r, col: c }) {
    if (!this.ready) return;
    const { row, col, size } = this.window;
    if (size === this.n || (r >= row && r < row + size && c >= col && c < col + size)) return;
    const start = (index, from) => (index >= from && index < from + size ? from : this.clamp(index - Math.floor(size / 2), size));
    this.window = { size, row: start(r, row), col: start(c, col) };
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
    const cell = this.ready ? this.cellAt(event) : null;
    this.tooltip.hidden = !cell;
    this.hovered = cell;
    if (!cell) return;
    const { row, col } = cell;
    const value = this.value(row, col);
    if (value === undefined) {
      this.needRow(row, () => {
        if (this.hovered?.row === row && this.hovered?.col === col && !this.tooltip.hidden) this.hover(event);
      });
    }
    this.tooltip.replaceChildren(
      el("span", {}, `query “${this.labels[row]}” (${row}) → key “${this.labels[col]}” (${col})`),
      el("br"),
      el(
        "strong",
        {},
        value === undefined
          ? `${cellSymbol(this.measure, row, col)}: fetching the exact value…`
          : Number.isNaN(value)
            ? `left out of this view${this.sink ? `; sink for this row: ${fixed(this.sink[row])}` : ""}`
            : `${cellSymbol(this.measure, row, col)} = ${fixed(value)}`,
      ),
    );
    this.tooltip.style.left = `${(col - this.window.col + 1) * this.cell + 8}px`;
    this.tooltip.style.top = `${(row - this.window.row + 1) * this.cell + 8}px`;
    this.keepInView(this.tooltip);
  }

  // A box beside the pointer moved back inside the window (a phone's 360 px cut a cell's tooltip short).
  keepInView(box) {
    const margin = 4;
    const { left, right, top, bottom } = box.getBoundingClientRect();
    const dx = Math.max(0, right - (document.documentElement.clientWidth - margin)) || Math.min(0, left - margin);
    const dy = Math.max(0, bottom - (window.innerHeight - margin)) || Math.min(0, top - margin);
    if (dx) box.style.left = `${parseFloat(box.style.left) - dx}px`;
    if (dy) box.style.top = `${parseFloat(box.style.top) - dy}px`;
  }

  // What is on screen as a picture: the title, the prompt, the cells, the token labels, the axis titles
  // and the colour bar with its range, laid out once for both PNG and SVG.
  layout() {
    const side = MAX_SIDE;
    const margin = { left: 130, top: 64, bottom: 120, right: 140 };
    const { size } = this.window;
    const cell = side / size;
    const step = Math.max(1, Math.ceil(MIN_LABEL_GAP / cell));
    const labels = [];
    for (let offset = 0; offset < size; offset += step) {
      labels.push({ row: this.window.row + offset, col: this.window.col + offset, middle: (offset + 0.5) * cell });
    }
    const bar = { x: margin.left + side + 40, y: margin.top, width: 16, height: side };
    const caption = this.caption.length > 110 ? `${this.caption.slice(0, 109)}…` : this.caption;
    const range = [fixed(this.zmax, 3), this.signed ? fixed(-this.zmax, 3) : "0"];
    // The colour bar says what its numbers are, beside it: "norm-weighted attention", "attention weight".
    const legend = { text: this.measure.name, x: bar.x + bar.width + 56, y: bar.y + bar.height / 2 };
    return { margin, side, labels, bar, caption, range, legend, width: margin.left + side + margin.right, height: margin.top + side + margin.bottom };
  }

  toPNG() {
    const { margin, side, labels, bar, caption, range, legend, width, height } = this.layout();
    const at = { x: margin.left, y: margin.top, width: side, height: side };
    const context = framedPicture({ width, height, cells: this.canvas, at, title: this.title.textContent });
    context.font = "13px sans-serif";
    context.fillText(caption, 10, 42);
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
    context.textAlign = "center";
    context.font = "12px sans-serif";
    context.fillText("key: attended to", margin.left + side / 2, height - 12);
    context.save();
    context.translate(16, margin.top + side / 2);
    context.rotate(-Math.PI / 2);
    context.fillText("query: attending", 0, 0);
    context.restore();
    const ramp = context.createLinearGradient(0, bar.y + bar.height, 0, bar.y);
    for (let step = 0; step <= 20; step += 1) ramp.addColorStop(step / 20, rgb(this.signed ? diverging(step / 10 - 1) : sequential(step / 20, this.scale)));
    context.fillStyle = ramp;
    context.fillRect(bar.x, bar.y, bar.width, bar.height);
    context.strokeStyle = "#888";
    context.strokeRect(bar.x, bar.y, bar.width, bar.height);
    context.fillStyle = "#111";
    context.textAlign = "left";
    context.fillText(range[0], bar.x + bar.width + 6, bar.y + 6);
    context.fillText(range[1], bar.x + bar.width + 6, bar.y + bar.height);
    context.save();
    context.translate(legend.x, legend.y);
    context.rotate(-Math.PI / 2);
    context.textAlign = "center";
    context.fillText(legend.text, 0, 0);
    context.restore();
    return pngOf(context.canvas);
  }

  // An SVG: the cells as one embedded image, the title, prompt, token labels and colour bar as vectors
  // and text (escaped).
  toSVG() {
    const { margin, side, labels, bar, caption, range, legend, width, height } = this.layout();
    const text = (value) => value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
    const stops = Array.from({ length: 21 }, (_, step) => {
      const colour = this.signed ? diverging(1 - step / 10) : sequential(1 - step / 20, this.scale);
      return `<stop offset="${step * 5}%" stop-color="${rgb(colour)}"/>`;
    });
    const parts = [
      `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif">`,
      `<defs><linearGradient id="ramp" x1="0" y1="0" x2="0" y2="1">${stops.join("")}</linearGradient></defs>`,
      `<rect width="${width}" height="${height}" fill="#fff"/>`,
      `<text x="10" y="22" font-size="16">${text(this.title.textContent)}</text>`,
      `<text x="10" y="42" font-size="13">${text(caption)}</text>`,
      `<image x="${margin.left}" y="${margin.top}" width="${side}" height="${side}" preserveAspectRatio="none" style="image-rendering:pixelated" href="${this.canvas.toDataURL("image/png")}"/>`,
      ...labels.map(
        ({ row, middle }) => `<text x="${margin.left - 6}" y="${margin.top + middle}" font-size="11" text-anchor="end" dominant-baseline="middle">${text(this.labels[row])}</text>`,
      ),
      ...labels.map(
        ({ col, middle }) => `<text font-size="11" text-anchor="end" transform="translate(${margin.left + middle},${margin.top + side + 6}) rotate(-60)">${text(this.labels[col])}</text>`,
      ),
      `<text x="${margin.left + side / 2}" y="${height - 12}" font-size="12" text-anchor="middle">key: attended to</text>`,
      `<text font-size="12" text-anchor="middle" transform="translate(16,${margin.top + side / 2}) rotate(-90)">query: attending</text>`,
      `<rect x="${bar.x}" y="${bar.y}" width="${bar.width}" height="${bar.height}" fill="url(#ramp)" stroke="#888"/>`,
      `<text x="${bar.x + bar.width + 6}" y="${bar.y + 6}" font-size="11">${range[0]}</text>`,
      `<text x="${bar.x + bar.width + 6}" y="${bar.y + bar.height}" font-size="11">${range[1]}</text>`,
      `<text font-size="12" text-anchor="middle" transform="translate(${legend.x},${legend.y}) rotate(-90)">${text(legend.text)}</text>`,
      "</svg>",
    ];
    return new Blob([parts.join("\n")], { type: "image/svg+xml" });
  }
}
