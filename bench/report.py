"""The benchmark's report: the per-size table (printed and in Markdown), the machine it ran on and the lab's commit,
and bench/results.md with every scenario's line."""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
import datetime
import os
import platform
import subprocess
from pathlib import Path

import torch
from atlas import atlas_line
from burst import burst_line
from harness import REPO, median
from join import join_line
from long_context import long_table
from per_request import OVERVIEW_SIZE, memory_line, per_request_line, request_ratios
from search import search_line
from training import training_line


def machine_info(load_at_start: tuple[float, float, float]) -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **lab_version(),
        # The 1-minute load average, at the start and the end: above the core count, something else was
        # running too and every number here is slower than this machine alone would give.
        "load_at_start": load_at_start[0],
        "load_at_end": os.getloadavg()[0],
    }


def lab_version() -> dict:
    """Which lab was measured: the commit, and whether its code had uncommitted changes."""
    git = ["git", "-C", str(REPO)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(
        [*git, "status", "--porcelain", "app", "static", "templates"], capture_output=True, text=True
    )
    return {"commit": commit or "unknown", "lab_uncommitted_changes": bool(changed.stdout.strip())}


def summarize(
    n: int, raw: list[dict], lab: list[dict], before: list[dict], wire: int, bertviz: list[dict], browser: list[dict]
) -> dict:
    """A size's row: the raw pass, the lab and the 2026-12-04 lab beside it (`before`, where measured), bertviz and
    the browser."""
    row = {
        "n": n,
        "raw_forward_ms": median(raw, "ms"),
        "lab_analyze_ms": median(lab, "analyze_ms"),
        "lab_attention_ms": median(lab, "attention_ms"),
        "lab_total_ms": median(lab, "total_ms"),
        "all_heads_bytes": lab[0]["attention_bytes"],
        "all_heads_wire_bytes": wire,
        "all_heads_dtype": lab[0]["attention_dtype"],
        "overview_bytes": lab[0]["overview_bytes"],
    }
    row["lab_over_raw"] = row["lab_total_ms"] / row["raw_forward_ms"]
    if before:
        row["lab_2026_12_04_total_ms"] = median(before, "total_ms")
        row["lab_2026_12_04_over_raw"] = row["lab_2026_12_04_total_ms"] / row["raw_forward_ms"]
    if bertviz:
        row["bertviz_ms"] = median(bertviz, "head_view_ms")
        row["bertviz_bytes"] = bertviz[0]["html_bytes"]
        row["bertviz_over_all_heads"] = row["bertviz_bytes"] / row["all_heads_bytes"]
        row["bertviz_over_wire"] = row["bertviz_bytes"] / row["all_heads_wire_bytes"]
        row["bertviz_over_overview"] = row["bertviz_bytes"] / row["overview_bytes"]
    if browser:
        row["first_heatmap_bytes"] = median(browser, "first_heatmap_bytes")
        row["enter_to_heatmap_ms"] = median(browser, "enter_to_heatmap_ms")
        row["click_to_view_ms"] = median(browser, "click_to_view_ms")
    row["samples"] = {"raw": raw, "lab": lab, "lab_2026_12_04": before, "bertviz": bertviz, "browser": browser}
    return row


COLUMNS = [  # (header, row key, format)
    ("N", "n", "{:d}"),
    ("raw forward ms", "raw_forward_ms", "{:.1f}"),
    ("lab analyze ms", "lab_analyze_ms", "{:.1f}"),
    ("lab attention ms", "lab_attention_ms", "{:.1f}"),
    ("lab analyze+attention ms", "lab_total_ms", "{:.1f}"),
    ("lab/raw", "lab_over_raw", "{:.2f}×"),
    ("bertviz head_view ms", "bertviz_ms", "{:.0f}"),
    ("bertviz HTML bytes", "bertviz_bytes", "{:,}"),
    ("all-heads bytes", "all_heads_bytes", "{:,}"),
    ("bertviz/all-heads", "bertviz_over_all_heads", "{:.1f}×"),
    ("all-heads bytes on the wire", "all_heads_wire_bytes", "{:,}"),
    ("bertviz/on the wire", "bertviz_over_wire", "{:.0f}×"),
    ("page's all-heads bytes", "overview_bytes", "{:,}"),
    ("bertviz/page's", "bertviz_over_overview", "{:.0f}×"),
    ("first-heatmap bytes", "first_heatmap_bytes", "{:,.0f}"),
    ("Enter→heatmap ms", "enter_to_heatmap_ms", "{:.0f}"),
    ("click→view ms", "click_to_view_ms", "{:.0f}"),
]


def table_cells(rows: list[dict]) -> list[list[str]]:
    return [[fmt.format(row[key]) if key in row else "—" for _, key, fmt in COLUMNS] for row in rows]


def text_table(rows: list[dict]) -> str:
    headers = [header for header, _, _ in COLUMNS]
    cells = table_cells(rows)
    widths = [max(len(line[i]) for line in [headers, *cells]) for i in range(len(headers))]
    lines = [headers, ["-" * width for width in widths], *cells]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)) for line in lines)


def markdown_table(rows: list[dict]) -> str:
    headers = [header for header, _, _ in COLUMNS]
    lines = [headers, ["---:"] * len(headers), *table_cells(rows)]
    return "\n".join(f"| {' | '.join(line)} |" for line in lines)


def machine_line(machine: dict, reps: int) -> str:
    return (
        f"{machine['nproc']} cores ({machine['cpu']}), torch {machine['torch']} "
        f"({machine['torch_threads']} threads), Python {machine['python']}, {machine['date']}, "
        f"lab at {machine['commit']}{' with uncommitted changes' if machine['lab_uncommitted_changes'] else ''}; "
        f"load average {machine['load_at_start']:.1f} at the start, {machine['load_at_end']:.1f} at the end; "
        f"medians of {reps} repetitions"
    )


def write_markdown(
    path: Path,
    rows: list[dict],
    memory: dict,
    burst: dict,
    join: dict,
    atlas: dict,
    search: dict,
    long: dict,
    training: dict,
    machine: dict,
    reps: int,
) -> None:
    notes = (
        "raw forward: transformers alone, `output_attentions=True`, in a process that keeps freed memory as "
        "the lab's server does, the faster of two passes in a row. lab: `POST /api/analyze` + "
        "`GET /api/runs/{id}/attention` over HTTP on loopback (so the matrices come uncompressed). bertviz: "
        '`head_view(..., html_action="return")` '
        "after the forward pass (at most 3 runs, one at N=512). all-heads bytes: the attention endpoint's "
        "body (6 blocks × 12 heads, default dtype uint8, full resolution); on the wire: the same body as sent to "
        "a client on another machine accepting zstd (httpx, named by a proxy the lab trusts; a client on the lab's "
        "own machine gets it uncompressed). page's all-heads bytes: what the "
        f"page downloads for its 72-head overview (`?size={OVERVIEW_SIZE}`: each head shrunk to at most "
        f"{OVERVIEW_SIZE}×{OVERVIEW_SIZE} by block maxima). first-heatmap bytes, Enter→heatmap, click→view: Debian's "
        "chromium, 1280×720, timed in the page with `performance.now()` up to the frame after the view updates."
    )
    # bench/lighthouse.py keeps its own section at the end of the file.
    old = path.read_text() if path.exists() else ""
    lighthouse = old[old.index("<!-- lighthouse -->") :] if "<!-- lighthouse -->" in old else ""
    ratios, before = request_ratios(rows)
    body = (
        f"{markdown_table(rows)}\n\n{per_request_line(ratios, reps, before)}\n\n"
        f"{memory_line(memory)}\n\n{burst_line(burst)}\n\n{join_line(join)}\n\n"
        f"{atlas_line(atlas)}\n\n{search_line(search)}\n\n{long_table(long)}\n\n{training_line(training)}\n\n"
        f"{machine_line(machine, reps)}\n\n{notes}\n"
    )
    path.write_text(f"{body}\n{lighthouse}" if lighthouse else body)
