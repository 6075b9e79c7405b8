// A training's pictures (app/web/schemas/training.py's TrainingStatus): its loss curves with the phase change
// marked, and every head's score at every checkpoint as one heads × steps picture. Both are Plotly charts on
// numeric axes (a repeated category label would merge: integer rows with tickvals/ticktext).

import { plotFont } from "./format.js";
import { loadPlotly } from "./plotly.js";

// The scores a heads × steps picture can show, each with its range (the colour scale is fixed to it, so two
// checkpoints' colours compare).
export const HEAD_SCORES = {
  prefix_min: { name: "induction (prefix-matching)", short: "induction", range: [0, 1] },
  previous: { name: "previous-token", short: "previous-token", range: [0, 1] },
  copying: { name: "copying (OV circuit)", short: "copying", range: [-1, 1] },
};

const CONFIG = { responsive: true, displaylogo: false, displayModeBar: false };
// The key above the chart (lab.css .grow-key) uses the same colours: a Plotly legend took the room of the curves
// on a phone.
const COLOURS = { train: "#1f77b4", held: "#d62728", phase: "rgba(255, 190, 60, 0.3)", phaseText: "#c77700", chosen: "#888" };

function headLabels(layers, heads) {
  const labels = [];
  for (let layer = 0; layer < layers; layer += 1) for (let head = 0; head < heads; head += 1) labels.push(`head ${layer}.${head}`);
  return labels;
}

function margins(font) {
  return { l: font.size * 5.5, r: font.size, t: font.size, b: font.size * 3.6 };
}

// A chart follows its element's width (a panel opened, enlarged, a phone turned): Plotly's own `responsive`
// follows the window only.
export function followWidth(element) {
  new ResizeObserver(() => element.data && window.Plotly?.Plots.resize(element)).observe(element);
}

// The training loss at every step, the held-out in-context loss at every checkpoint, the phase change as a
// band (a tenth to nine tenths of its drop) and a line (half), and the checkpoint the slider is on.
export async function drawCurves(element, status, chosenStep) {
  const Plotly = await loadPlotly();
  const font = plotFont();
  const phase = status.phase_change;
  const steps = status.checkpoints.map((checkpoint) => checkpoint.step);
  const shapes = [];
  const annotations = [];
  if (phase) {
    shapes.push({ type: "rect", xref: "x", yref: "paper", x0: phase.start, x1: phase.end, y0: 0, y1: 1, fillcolor: COLOURS.phase, line: { width: 0 } });
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: phase.step, x1: phase.step, y0: 0, y1: 1, line: { color: "#b36b00", width: 2, dash: "dash" } });
    // Halfway up (above the curves once they have dropped, below them before), on the side of the line with the
    // more room, in two short lines: on a phone the plot is about 200 px wide.
    const side = phase.step > status.steps / 2 ? "right" : "left";
    const text = side === "left" ? ` phase change<br> at step ${phase.step}` : `phase change <br>at step ${phase.step} `;
    annotations.push({ x: phase.step, y: 0.6, xref: "x", yref: "paper", xanchor: side, align: side, text, showarrow: false, font: { ...font, color: COLOURS.phaseText } });
  }
  if (chosenStep !== null) {
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: chosenStep, x1: chosenStep, y0: 0, y1: 1, line: { color: COLOURS.chosen, width: 1 } });
  }
  const held = status.checkpoints.map((checkpoint) => checkpoint.scores.in_context_loss);
  await Plotly.react(
    element,
    [
      {
        type: "scatter",
        mode: "lines",
        name: "training loss",
        x: status.losses.map((_, index) => index + 1),
        y: status.losses,
        line: { color: COLOURS.train, width: 1.5 },
        hovertemplate: "step %{x}<br>training loss %{y:.3f} nats<extra></extra>",
      },
      {
        type: "scatter",
        mode: "lines+markers",
        name: "in-context loss (held out)",
        x: steps,
        y: held,
        line: { color: COLOURS.held, width: 2.5 },
        marker: { size: 6 },
        hovertemplate: "step %{x}<br>second copy's loss %{y:.3f} nats<extra></extra>",
      },
    ],
    {
      font,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      margin: { ...margins(font), l: font.size * 3.6 }, // the losses' ticks are one digit: the plot gets the room
      xaxis: { title: { text: "step" }, range: [0, status.steps], zeroline: false },
      yaxis: { title: { text: "loss (nats)" }, rangemode: "tozero" },
      showlegend: false,
      shapes,
      annotations,
    },
    CONFIG,
  );
}

// One row per head (block.head), one column per checkpoint, coloured by the chosen score.
export async function drawHeads(element, status, score, chosenStep) {
  const Plotly = await loadPlotly();
  const font = plotFont();
  const { layers, heads } = status.spec;
  const labels = headLabels(layers, heads);
  const rows = labels.map((_, index) => index);
  const steps = status.checkpoints.map((checkpoint) => checkpoint.step);
  const z = rows.map((row) => status.checkpoints.map((checkpoint) => checkpoint.scores[score][Math.floor(row / heads)][row % heads]));
  const about = HEAD_SCORES[score];
  const shapes =
    chosenStep === null ? [] : [{ type: "line", xref: "x", yref: "paper", x0: chosenStep, x1: chosenStep, y0: 0, y1: 1, line: { color: "#fff", width: 2 } }];
  await Plotly.react(
    element,
    [
      {
        type: "heatmap",
        x: steps,
        y: rows,
        z,
        zmin: about.range[0],
        zmax: about.range[1],
        colorscale: score === "copying" ? "RdBu" : "Viridis",
        reversescale: score === "copying",
        colorbar: { thickness: font.size },
        customdata: rows.map((row) => steps.map(() => labels[row])),
        hovertemplate: `%{customdata}, step %{x}<br>${about.short} %{z:.3f}<extra></extra>`,
      },
    ],
    {
      font,
      paper_bgcolor: "rgba(0,0,0,0)",
      title: { text: `Each head's ${about.short} score`, x: 0, xanchor: "left", font },
      margin: { ...margins(font), t: font.size * 2.4 },
      xaxis: { title: { text: "step" }, zeroline: false },
      yaxis: { tickvals: rows, ticktext: labels, autorange: "reversed" },
      shapes,
    },
    CONFIG,
  );
}
