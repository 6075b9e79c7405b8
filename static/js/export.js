// Saving what is on screen: the heatmap as PNG (Plotly's own, offline), its numbers as JSON or CSV.

export function savePNG(node, name) {
  return Plotly.downloadImage(node, { format: "png", filename: name, scale: 2 });
}

function download(text, name, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
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
    `# prompt: ${view.text.replace(/[\r\n]+/g, " ")}`,
    `# model: ${view.model}; mask: ${view.mask}; layer: ${view.layer}; head: ${view.head}; rows are queries, columns keys`,
    ["query \\ key", ...view.tokens.map((token) => `${token.index}:${token.text}`)].map(csvCell).join(","),
    ...view.matrix.map((row, index) => [`${index}:${view.tokens[index].text}`, ...row].map(csvCell).join(",")),
  ];
  download(`${lines.join("\n")}\n`, `${name}.csv`, "text/csv");
}
