// Every colour the views draw with: the heads' categorical palette and the scales for weights and
// activations. Pure: no DOM. A colour is [r, g, b] with integers 0–255; rgb() makes it CSS.

// Twelve heads, one colour each: Paul Tol's discrete rainbow for 12 colours (Paul Tol, "Colour Schemes",
// SRON technical note SRON/EPS/TN/09-002; tol_colors.py, `rainbow_discrete` with 12 colours: numbers
// 3, 6, 9, 10, 12, 14, 15, 17, 18, 21, 24 and 26 of its 29), made to stay apart for colour-blind readers.
// Tol lists them in rainbow order, where neighbours are near in hue. Heads are compared with their
// neighbours (0, 1 and 2 most often), so they are reordered here: any two heads one or two apart are at
// least 19 CIEDE2000 apart under normal vision and under simulated protanopia, deuteranopia and
// tritanopia alike (in Tol's order, 8.9), and heads 0–2 are dark enough (CIELAB L* < 60) to hold as thin
// lines on white. tests/browser/test_palette.py measures these claims.
export const HEAD_COLORS = [
  "#E8601C", "#5289C7", "#882E72", "#F4A736", "#7BAFDE", "#DC050C",
  "#CAE0AB", "#D1BBD7", "#1965B0", "#4EB265", "#F7F056", "#AE76A3",
];

// Sequential scales for weights in [0, 1]: stops evenly spaced from 0 to 1, interpolated linearly in sRGB.
// blues is the lab's own white → deep blue (t → [255 − 222t, 255 − 185t, 255 − 95t]: two stops are that
// line exactly). viridis and cividis are perceptually uniform, and their lightness rises steadily, so they
// still read in grey or with a colour vision deficiency. Their ten stops are those of the Python plotly
// package (a dependency of the lab): plotly.colors.sequential.Viridis and plotly.colors.sequential.Cividis.
export const SCALES = {
  blues: { label: "blues (white to deep blue)", stops: ["#ffffff", "#2146a0"] },
  viridis: {
    label: "viridis (perceptually uniform)",
    stops: ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725"],
  },
  cividis: {
    label: "cividis (perceptually uniform, for colour-blind readers)",
    stops: ["#00224e", "#123570", "#3b496c", "#575d6d", "#707173", "#8a8678", "#a59c74", "#c3b369", "#e1cc55", "#fee838"],
  },
};

const parsed = new Map(); // scale name → its stops as [r, g, b]

function stopsOf(scale) {
  if (!parsed.has(scale)) {
    if (!(scale in SCALES)) throw new Error(`unknown colour scale: ${scale}`);
    parsed.set(scale, SCALES[scale].stops.map(hexColor));
  }
  return parsed.get(scale);
}

function hexColor(hex) {
  return [1, 3, 5].map((at) => parseInt(hex.slice(at, at + 2), 16));
}

// The colour of t in [0, 1] (clamped) on a sequential scale.
export function sequential(t, scale = "blues") {
  const stops = stopsOf(scale);
  const position = Math.max(0, Math.min(1, t)) * (stops.length - 1);
  const index = Math.min(Math.floor(position), stops.length - 2);
  const fraction = position - index;
  const [from, to] = [stops[index], stops[index + 1]];
  return from.map((value, channel) => Math.round(value + (to[channel] - value) * fraction));
}

// Blue for negative, white for zero, red for positive: for activations (t in [-1, 1]).
export function diverging(t) {
  const c = Math.max(-1, Math.min(1, t));
  if (c >= 0) return [255, Math.round(255 - 180 * c), Math.round(255 - 200 * c)];
  return [Math.round(255 + 200 * c), Math.round(255 + 130 * c), 255];
}

export function rgb([r, g, b]) {
  return `rgb(${r},${g},${b})`;
}

// A colour bar: 0 where the gradient starts (the bottom, "to top") and 1 where it ends, one CSS stop per stop.
export function gradient(scale, direction = "to top") {
  const stops = stopsOf(scale);
  const last = stops.length - 1;
  const parts = stops.map((color, index) => `${rgb(color)} ${+((100 * index) / last).toFixed(3)}%`);
  return `linear-gradient(${direction}, ${parts.join(", ")})`;
}
