// Small shared helpers: number formatting, DOM building, vector strips. User text only ever goes in as text.

import { diverging, rgb } from "./colors.js";

// "1 head", "12 heads": a count and its noun.
export function count(n, noun) {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

export function fixed(value, digits = 4) {
  return Number(value).toFixed(digits);
}

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Plotly reads a few HTML-like tags in labels; escaping keeps a token such as "<b>" literal.
export function plotlyText(text) {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}

// Plot text in the page's own colours and size, so presentation mode reaches the charts too.
export function plotFont() {
  const style = getComputedStyle(document.body);
  const large = document.body.classList.contains("present");
  return { color: style.getPropertyValue("--ink").trim(), size: large ? 17 : 12, family: style.fontFamily };
}

// A row of numbers as a strip of coloured cells, one per dimension (384 fit in 384 px).
export function vectorStrip(values, { label = "", cellWidth = 1, height = 18 } = {}) {
  const canvas = el("canvas", { class: "strip", width: values.length * cellWidth, height, role: "img", "aria-label": label });
  const context = canvas.getContext("2d");
  const scale = Math.max(...values.map(Math.abs)) || 1;
  values.forEach((value, index) => {
    context.fillStyle = rgb(diverging(value / scale));
    context.fillRect(index * cellWidth, 0, cellWidth, height);
  });
  canvas.title = `${values.length} numbers; colour scale ±${fixed(scale, 3)}`;
  return canvas;
}

export function numberList(values, field, digits = 4) {
  return el(
    "div",
    { class: "numbers", dataset: { field } },
    ...values.map((value, index) => el("span", { class: "num", dataset: { value: String(value), dim: String(index) } }, fixed(value, digits))),
  );
}

export function norm(values) {
  return Math.sqrt(values.reduce((sum, value) => sum + value * value, 0));
}

export function argmax(values) {
  let best = 0;
  for (let index = 1; index < values.length; index += 1) if (values[index] > values[best]) best = index;
  return best;
}
