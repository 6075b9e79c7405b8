// Saving what is on screen: the heatmap as PNG, its numbers as JSON or CSV. All made in the page.

// blob: an image made by the view (Heatmap.toPNG, toSVG, …); extension: "png" or "svg".
export function saveImage(blob, name, extension) {
  download(blob, `${name}.${extension}`);
}

function download(content, name, type) {
  const url = URL.createObjectURL(content instanceof Blob ? content : new Blob([content], { type }));
  const link = Object.assign(document.createElement("a"), { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// view: {text, model, mask, pooling, layer, head, tokens, matrix (rows), pooled}
export function saveJSON(view, name) {
  download(JSON.stringify(view, null, 1), `${name}.json`, "application/json");
}

// Numbers go out as they are; text is quoted, and a leading = + - @ is defused so a spreadsheet never
// runs a token as a formula.
function csvCell(value) {
  if (typeof value === "number") return String(value);
  const text = /^[=+\-@]/.test(value) ? `'${value}` : value;
  return /[",\n\r]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

export function saveCSV(view, name) {
  const lines = [
    csvCell(`# prompt: ${view.text.replace(/[\r\n]+/g, " ")}`),
    csvCell(`# model: ${view.model}; mask: ${view.mask}; layer: ${view.layer}; head: ${view.head}; rows are queries, columns keys`),
    ["query \\ key", ...view.tokens.map((token) => `${token.index}:${token.text}`)].map(csvCell).join(","),
    ...view.matrix.map((row, index) => [`${index}:${view.tokens[index].text}`, ...row].map(csvCell).join(",")),
  ];
  download(`${lines.join("\n")}\n`, `${name}.csv`, "text/csv");
}
