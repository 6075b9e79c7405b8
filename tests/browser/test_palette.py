"""static/js/colors.js, imported in chromium: the heads' colours stay apart for colour-blind readers, and the
sequential scales are plotly's stops, linearly interpolated.

Colour vision deficiency is simulated as Machado, Oliveira & Fernandes (2009), "A Physiologically-based Model
for Simulation of Color Vision Deficiency", IEEE TVCG 15(6):1291–1298, severity 1.0 (the paper's Table 1),
applied to linear RGB. Colours are compared in CIELAB (D65) with CIEDE2000 (Sharma, Wu & Dalal 2005).
"""

import math
import re

import numpy as np
import plotly.colors
import pytest

pytestmark = pytest.mark.slow

# Tol's 12: numbers 3, 6, 9, 10, 12, 14, 15, 17, 18, 21, 24, 26 of his 29 discrete rainbow colours.
TOL_12 = {
    "#D1BBD7", "#AE76A3", "#882E72", "#1965B0", "#5289C7", "#7BAFDE",
    "#4EB265", "#CAE0AB", "#F7F056", "#F4A736", "#E8601C", "#DC050C",
}  # fmt: skip
OLD_PALETTE = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
]  # fmt: skip

# Machado et al. (2009), Table 1, severity 1.0; each row sums to 1, so white and greys are unchanged.
MACHADO = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
}
VISIONS = ["normal", *MACHADO]

# The worst pair must stay above this in every vision. CIEDE2000 ≈ 1 is a just-noticeable difference between
# two large patches side by side; a head's colour is matched from a legend to thin lines and short bars, which
# needs several times that. Tol's 12 measure 7.57 at worst (protanopia: #AE76A3 against #5289C7), so 7 keeps
# them and fails any near-duplicate (the old palette's orange and green are 1.25 apart under protanopia).
MIN_DELTA_E = 7.0
# Heads one or two apart are compared most (0, 1, 2): colors.js orders the palette so these pairs are at
# least this far apart in every vision (measured 19.5); Tol's rainbow order gives 8.9.
MIN_NEIGHBOUR_DELTA_E = 19.0


STOPS = [k / 9 for k in range(10)]  # where plotly's ten stops sit
MIDPOINTS = [(2 * k + 1) / 18 for k in range(9)]


@pytest.fixture(scope="module")
def colors(browser, server):
    """What colors.js exports and computes, read in chromium."""
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and errors.append(f"console: {message.text}"))
    page.route("**/favicon.ico", lambda route: route.fulfill(status=204))  # a bare JSON page has none
    page.goto(f"{server}/api/health")  # the lab's origin: script-src 'self' lets a module import from it
    ts = [*STOPS, *MIDPOINTS, *(i / 1000 for i in range(1001)), -0.5, -1e-9, 1 + 1e-9, 1.5]
    result = page.evaluate(
        """async (ts) => {
          const m = await import('/static/js/colors.js');
          const names = Object.keys(m.SCALES);
          return {
            HEAD_COLORS: m.HEAD_COLORS,
            SCALES: m.SCALES,
            sequential: Object.fromEntries(names.map((name) => [name, ts.map((t) => m.sequential(t, name))])),
            byDefault: ts.map((t) => m.sequential(t)),
            diverging: ts.map((t) => m.diverging(2 * t - 1)),
            rgb: m.rgb([1, 22, 255]),
            gradient: Object.fromEntries(names.map((name) => [name, m.gradient(name)])),
            gradientRight: m.gradient('viridis', 'to right'),
          };
        }""",
        ts,
    )
    page.close()
    assert errors == []
    return {**result, "ts": ts}


# --- colour science, independent of the page ---------------------------------------------------------------


def linear_rgb(hex_color: str) -> np.ndarray:
    srgb = np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


SRGB_TO_XYZ = np.array(
    [[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750], [0.0193339, 0.1191920, 0.9503041]]
)
D65 = SRGB_TO_XYZ @ np.ones(3)  # the white of sRGB


def lab(linear: np.ndarray) -> np.ndarray:
    xyz = SRGB_TO_XYZ @ linear / D65
    delta = 6 / 29
    f = np.where(xyz > delta**3, np.cbrt(xyz), xyz / (3 * delta**2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def simulate(hex_color: str, vision: str) -> np.ndarray:
    linear = linear_rgb(hex_color)
    if vision == "normal":
        return lab(linear)
    return lab(np.clip(np.array(MACHADO[vision]) @ linear, 0, 1))


def ciede2000(lab1, lab2) -> float:
    """Sharma, Wu & Dalal (2005), "The CIEDE2000 color-difference formula: implementation notes"."""
    (L1, a1, b1), (L2, a2, b2) = lab1, lab2
    mean_c = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(mean_c**7 / (mean_c**7 + 25**7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2
    c1, c2 = math.hypot(a1, b1), math.hypot(a2, b2)
    h1 = math.degrees(math.atan2(b1, a1)) % 360 if c1 else 0.0
    h2 = math.degrees(math.atan2(b2, a2)) % 360 if c2 else 0.0
    dh = 0.0 if c1 * c2 == 0 else (h2 - h1 + 180) % 360 - 180
    d_hue = 2 * math.sqrt(c1 * c2) * math.sin(math.radians(dh / 2))
    mean_l, mean_c = (L1 + L2) / 2, (c1 + c2) / 2
    if c1 * c2 == 0:
        mean_h = h1 + h2
    elif abs(h1 - h2) <= 180:
        mean_h = (h1 + h2) / 2
    else:
        mean_h = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    t = (
        1
        - 0.17 * math.cos(math.radians(mean_h - 30))
        + 0.24 * math.cos(math.radians(2 * mean_h))
        + 0.32 * math.cos(math.radians(3 * mean_h + 6))
        - 0.20 * math.cos(math.radians(4 * mean_h - 63))
    )
    rotation = 30 * math.exp(-(((mean_h - 275) / 25) ** 2))
    rc = 2 * math.sqrt(mean_c**7 / (mean_c**7 + 25**7))
    sl = 1 + 0.015 * (mean_l - 50) ** 2 / math.sqrt(20 + (mean_l - 50) ** 2)
    sc, sh = 1 + 0.045 * mean_c, 1 + 0.015 * mean_c * t
    rt = -math.sin(math.radians(2 * rotation)) * rc
    dl, dc, dhh = (L2 - L1) / sl, (c2 - c1) / sc, d_hue / sh
    return math.sqrt(dl**2 + dc**2 + dhh**2 + rt * dc * dhh)


def distances(palette, vision) -> np.ndarray:
    labs = [simulate(color, vision) for color in palette]
    return np.array([[ciede2000(p, q) for q in labs] for p in labs])


def worst_pair(palette, vision, span=None):
    d = distances(palette, vision)
    pairs = [(i, j) for i in range(len(palette)) for j in range(i + 1, len(palette)) if span is None or j - i <= span]
    i, j = min(pairs, key=lambda pair: d[pair])
    return d[i, j], palette[i], palette[j]


# Sharma et al.'s test data: pairs 1, 7, 17–20, 25 and 34 (Lab, Lab, ΔE00).
SHARMA = [
    ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
    ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
    ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
    ((50.0, 2.5, 0.0), (61.0, -5.0, 29.0), 22.8977),
    ((50.0, 2.5, 0.0), (56.0, -27.0, -3.0), 31.9030),
    ((50.0, 2.5, 0.0), (58.0, 24.0, 15.0), 19.4535),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ((2.0776, 0.0795, -1.1350), (0.9033, -0.0636, -0.5514), 0.9082),
]


@pytest.mark.parametrize(("lab1", "lab2", "expected"), SHARMA)
def test_ciede2000_matches_sharmas_test_data(lab1, lab2, expected):
    assert ciede2000(lab1, lab2) == pytest.approx(expected, abs=5e-5)
    assert ciede2000(lab2, lab1) == pytest.approx(expected, abs=5e-5)


def test_the_simulation_keeps_greys_and_reads_srgb_white_as_d65():
    for matrix in MACHADO.values():
        np.testing.assert_allclose(np.sum(matrix, axis=1), 1, atol=2e-6)
    np.testing.assert_allclose(simulate("#FFFFFF", "normal"), [100, 0, 0], atol=1e-9)
    np.testing.assert_allclose(simulate("#808080", "deuteranopia"), simulate("#808080", "normal"), atol=1e-3)


# --- the palette ---------------------------------------------------------------------------------------------


def test_the_heads_get_tols_twelve_colours(colors):
    palette = colors["HEAD_COLORS"]
    assert len(palette) == 12 and {color.upper() for color in palette} == TOL_12


def test_head_colours_stay_apart_in_every_colour_vision(colors):
    new, old = colors["HEAD_COLORS"], OLD_PALETTE
    table = {vision: (worst_pair(new, vision), worst_pair(old, vision)) for vision in VISIONS}
    report = "\n".join(
        f"{vision:>12}: new {n[0]:6.2f} ({n[1]}/{n[2]})   old {o[0]:6.2f} ({o[1]}/{o[2]})"
        for vision, (n, o) in table.items()
    )
    print(f"\nminimum pairwise CIEDE2000 among the 12 head colours\n{report}")
    new_worst = min(n[0] for n, _ in table.values())
    old_worst = min(o[0] for _, o in table.values())
    assert new_worst > MIN_DELTA_E, report
    assert new_worst > old_worst, report
    neighbours = {vision: worst_pair(new, vision, span=2) for vision in VISIONS}
    assert min(d for d, *_ in neighbours.values()) >= MIN_NEIGHBOUR_DELTA_E, neighbours
    assert all(simulate(color, "normal")[0] < 60 for color in new[:3])  # heads 0–2 hold as thin lines on white


# --- the scales ----------------------------------------------------------------------------------------------


def hex_rgb(hex_color: str) -> list[int]:
    return [int(hex_color[i : i + 2], 16) for i in (1, 3, 5)]


def js_round(x: float) -> int:
    return math.floor(x + 0.5)  # Math.round: halves go up


@pytest.mark.parametrize("name", ["viridis", "cividis"])
def test_perceptual_scales_are_plotlys_stops_linearly_interpolated(colors, name):
    stops = getattr(plotly.colors.sequential, name.capitalize())
    assert [s.lower() for s in colors["SCALES"][name]["stops"]] == [s.lower() for s in stops] and len(stops) == 10
    assert "perceptually uniform" in colors["SCALES"][name]["label"]
    rgb_stops = np.array([hex_rgb(s) for s in stops], dtype=float)
    shown = np.array(colors["sequential"][name])
    for t, color in zip(colors["ts"], shown, strict=True):
        position = min(max(t, 0), 1) * 9
        at = min(int(position), 8)
        exact = rgb_stops[at] + (rgb_stops[at + 1] - rgb_stops[at]) * (position - at)
        assert np.all(np.abs(color - exact) <= 0.5 + 1e-9), (t, color, exact)  # exact, rounded to an integer
    np.testing.assert_array_equal(shown[: len(STOPS)], rgb_stops)  # bit for bit: no rounding (on a stop: the stop)
    middle = shown[len(STOPS) : len(STOPS) + len(MIDPOINTS)]
    # bit for bit: no rounding (integer colours; halves go up)
    np.testing.assert_array_equal(middle, np.floor((rgb_stops[:-1] + rgb_stops[1:]) / 2 + 0.5))
    assert shown[-4].tolist() == shown[-3].tolist() == rgb_stops[0].tolist()  # clamped below 0
    assert shown[-2].tolist() == shown[-1].tolist() == rgb_stops[-1].tolist()  # and above 1


def test_blues_is_the_labs_formula_and_the_default(colors):
    for t, color, default in zip(colors["ts"], colors["sequential"]["blues"], colors["byDefault"], strict=True):
        c = min(max(t, 0), 1)
        assert color == default == [js_round(255 - 222 * c), js_round(255 - 185 * c), js_round(255 - 95 * c)], t


def test_diverging_and_rgb_are_formatjs_numbers(colors):
    for t, color in zip(colors["ts"], colors["diverging"], strict=True):
        c = min(max(2 * t - 1, -1), 1)
        expected = (
            [255, js_round(255 - 180 * c), js_round(255 - 200 * c)]
            if c >= 0
            else [js_round(255 + 200 * c), js_round(255 + 130 * c), 255]
        )
        assert color == expected, t
    assert colors["rgb"] == "rgb(1,22,255)"


def test_gradients_run_from_zero_to_one(colors):
    stop = re.compile(r"rgb\((\d+),(\d+),(\d+)\) ([\d.]+)%")
    for name, css in colors["gradient"].items():
        assert css.startswith("linear-gradient(to top, ") and css.endswith(")")
        found = stop.findall(css)
        stops = colors["SCALES"][name]["stops"]
        assert [hex_rgb(s) for s in stops] == [[int(r), int(g), int(b)] for r, g, b, _ in found]
        positions = [float(p) for *_, p in found]
        np.testing.assert_allclose(positions, np.linspace(0, 100, len(stops)), atol=1e-3)
    assert colors["gradientRight"].startswith("linear-gradient(to right, rgb(68,1,84) 0%")
