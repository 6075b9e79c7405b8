// Where the views find their elements: the page's document, or the shadow root a notebook's widget draws in.
// The widget (app/notebook/widget.js) loads its own copy of the view modules and sets its root here before
// it imports any view, so the same modules draw in either place, each copy in its own.

let root = document;

export function drawIn(node) {
  root = node;
}

export function byId(id) {
  return root.getElementById(id);
}

export function find(selector) {
  return root.querySelector(selector);
}
