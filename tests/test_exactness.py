"""The suite compares two computations bit for bit only where one of tests/float32.py's BITWISE_REASONS holds,
and says which at the comparison: an Intel Xeon's kernels sum a padded pass in another order than a lone one
where an AMD EPYC's mostly do not (issue 54), so a bitwise comparison of two passes of different shapes can
pass on one and fail on the other. The suite's source is read for every torch.equal / array_equal /
assert_array_equal; and the comparisons said to hold for "same shapes" are run again under MKL's compatible
kernels (MKL_CBWR=COMPATIBLE), whose sums change order with a product's shape on any x86 CPU, as the Xeon's
do: there a padded MiniLM pass is not bitwise a lone one, and the pair view's test that failed on the Xeon
(#54: 1.04e-7) failed here too (150 of 165 cells, up to 2.4e-7), where the default kernels pass it."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.float32 import BITWISE_REASONS

TESTS = Path(__file__).resolve().parent
BITWISE = {"equal", "array_equal", "array_equiv", "assert_array_equal", "assert_equal"}
SAID = re.compile(r"#.*\bbit for bit: (" + "|".join(map(re.escape, BITWISE_REASONS)) + r")\b")
# What a compound statement holds besides its header: its bodies are statements of their own.
BODIES = {"body", "orelse", "finalbody", "handlers", "cases"}


def bitwise_calls(statement: ast.stmt):
    """The bitwise comparisons in a statement itself (a compound statement's header only)."""
    for name, value in ast.iter_fields(statement):
        for part in value if isinstance(value, list) else [value]:
            if name in BODIES or not isinstance(part, ast.AST):
                continue
            for found in ast.walk(part):
                if isinstance(found, ast.Call):
                    called = getattr(found.func, "attr", None) or getattr(found.func, "id", None)
                    if called in BITWISE:
                        yield found


def said_lines(statement: ast.stmt, lines: list[str]) -> list[str]:
    """Where a statement may say why: the line above it and its own lines (a compound statement's header)."""
    bodies = [part for name in BODIES for part in getattr(statement, name, None) or []]
    last = min(part.lineno for part in bodies) - 1 if bodies else statement.end_lineno
    return lines[max(statement.lineno - 2, 0) : last]


def unexplained(path: Path, shown: str) -> list[str]:
    """Each bitwise comparison whose statement (or the line above it) does not say why it may be bitwise, as
    `shown:line: the call`, in the file's order."""
    source = path.read_text()
    lines = source.splitlines()
    missing = []
    for statement in ast.walk(ast.parse(source)):
        if isinstance(statement, ast.stmt):
            for call in bitwise_calls(statement):
                if not any(SAID.search(line) for line in said_lines(statement, lines)):
                    missing.append((call.lineno, f"{shown}:{call.lineno}: {ast.unparse(call)[:90]}"))
    return [place for _, place in sorted(missing)]


def test_every_bitwise_comparison_in_the_suite_says_why_it_may_be_bitwise():
    paths = sorted(TESTS.rglob("*.py"))
    missing = [place for path in paths for place in unexplained(path, str(path.relative_to(TESTS.parent)))]
    reasons = "; ".join(f"{word!r} ({meaning})" for word, meaning in BITWISE_REASONS.items())
    if missing:
        pytest.fail(
            "bitwise comparisons without `# bit for bit: <reason>`, the reason one of "
            f"{reasons}; two passes of different shapes take tests/float32.py's tolerance:\n" + "\n".join(missing)
        )


def test_the_reading_finds_a_comparison_without_its_reason_and_takes_one_with_it(tmp_path):
    said = tmp_path / "said.py"
    said.write_text(
        "import torch\n"
        "def test_a(a, b):\n"
        "    assert torch.equal(a, b)  # bit for bit: read back\n"
        "    # bit for bit: same shapes (the model's own lone pass)\n"
        "    np.testing.assert_array_equal(\n        a,\n        b,\n    )\n"
        "    for x in a:\n"
        "        assert all(np.array_equal(x, y) for y in b)  # bit for bit: no rounding, ids\n"
    )
    assert unexplained(said, "said.py") == []
    bare = tmp_path / "bare.py"
    bare.write_text(
        "def test_b(a, b, batched, alone):\n"
        "    assert torch.equal(batched, alone)  # bitwise\n"
        "    if a.equal(b):  # bit for bit: padded and lone\n"
        "        pass\n"
        "    with context():\n"
        "        np.testing.assert_array_equal(a, b)\n"
        "    # bit for bit: read back\n"
        "    x = 1\n"
        "    assert np.array_equal(a, b)\n"
    )
    assert [place.split(":")[1] for place in unexplained(bare, "bare.py")] == ["2", "3", "6", "9"]


COMPATIBLE = {"MKL_CBWR": "COMPATIBLE"}
CANARY = "tests/test_exactness.py::test_under_compatible_kernels_a_padded_minilm_pass_is_not_a_lone_one"
# The "same shapes" comparisons run again under COMPATIBLE in the suite, on MiniLM and tiny models: each kind
# once (a block computed again at its pass's padded length, lone passes against the model's own, a window cut
# from a kept block, rows of a block computed alone, an ablated run's earlier blocks). `make exact` runs them all.
UNDER_COMPATIBLE = (
    "tests/test_batching.py::test_a_padded_runs_block_computed_again_is_the_one_its_pass_made[tiny]",
    "tests/test_blocks.py::test_a_block_is_computed_once_while_kept_and_again_the_same_after_it_is_let_go",
    "tests/test_blocks.py::test_the_lab_keeps_the_blocks_its_pass_made_and_computes_one_let_go_once_within_its_share",
    "tests/test_blocks.py::test_a_padded_row_of_a_batch_keeps_its_passs_own_block",
    "tests/test_capture.py::test_the_weights_are_not_recorded_but_computed_equal_to_output_attentions",
    "tests/test_cells.py::test_minilm_windows_and_overviews_are_cut_from_its_whole_blocks",
    "tests/test_families.py::test_rows_computed_alone_are_the_blocks_own_bits[llama]",
    "tests/test_lessons.py::test_ablating_a_head_changes_only_what_follows_it",
)


def same_shape_tests() -> list[str]:
    """Every test of tests/ (not the browser's) with a comparison said to hold for the same shapes, and the
    canary that says the kernels they run under still sum by shapes: what `make exact` runs under COMPATIBLE."""
    found = []
    for path in sorted(set(TESTS.glob("test_*.py")) - {Path(__file__)}):  # not this one's own examples
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                if any("bit for bit: same shapes" in line for line in lines[node.lineno - 1 : node.end_lineno]):
                    found.append(f"tests/{path.name}::{node.name}")
    return [*found, CANARY]


def test_the_same_shapes_comparisons_hold_under_kernels_whose_sums_follow_the_shapes():
    """A comparison said to hold for the same shapes holds where a product's shape changes its sums' order."""
    assert {node.split("[")[0] for node in UNDER_COMPATIBLE} <= set(same_shape_tests()), "one no longer says so"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *UNDER_COMPATIBLE, CANARY],
        cwd=TESTS.parent,
        env={**os.environ, **COMPATIBLE},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " skipped" not in result.stdout.splitlines()[-1], result.stdout[-2000:]


def test_under_compatible_kernels_a_padded_minilm_pass_is_not_a_lone_one(minilm):
    """What makes the run above worth its time: under COMPATIBLE a text of 12 to 33 tokens padded beside a
    longer one is not bitwise the text alone (on an AMD EPYC, at each of 12, 14, 19, 23, 28 and 33 tokens, up
    to 1.2e-6 in a weight; with the default kernels only under 12 tokens), as on #54's Xeon at every length."""
    if os.environ.get("MKL_CBWR") != COMPATIBLE["MKL_CBWR"]:
        pytest.skip("run under MKL_CBWR=COMPATIBLE by the test above")
    tokenizer, model = minilm.tokenizer, minilm.model
    longer = tokenizer("The river bank was steep and the animal was tired. " * 12)["input_ids"]
    text = tokenizer(
        "A quick brown fox jumps over the lazy dog and the cat, said the paper! Where can I open a savings account "
        "with a good interest rate, and what is the river bank like in spring?"
    )
    differences = {}
    with torch.inference_mode():
        for n in (12, 14, 19, 23, 28, 33):
            ids = text["input_ids"][: n - 1] + [tokenizer.sep_token_id]
            padded = torch.tensor([longer, ids + [tokenizer.pad_token_id] * (len(longer) - n)])
            alone = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
            batch = model(
                input_ids=padded, attention_mask=(padded != tokenizer.pad_token_id).long(), output_attentions=True
            ).attentions
            differences[n] = max(float((a[0] - b[1, :, :n, :n]).abs().max()) for a, b in zip(alone, batch, strict=True))
    assert max(differences.values()) > 0, (
        f"MKL_CBWR=COMPATIBLE no longer sums a padded pass in another order ({differences}): find another setting"
    )
