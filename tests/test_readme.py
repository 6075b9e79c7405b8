"""What the README and docs/ tell a newcomer is what the code does: every count, name and place they state is
read here from the code that decides it (the tour's steps, the panels and experiments, where each control
sits, every setting and its default), and every link between them leads somewhere."""

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from app.engine.families import FAMILIES
from app.engine.measures import MEASURES, Measure
from app.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {
    path.relative_to(ROOT).as_posix(): path.read_text()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
}
TEMPLATE = (ROOT / "templates" / "index.html").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def headings(text: str) -> list[tuple[int, str, int, int]]:
    """A Markdown text's headings, (level, title, start, end), leaving out lines in fenced code (a shell
    comment is not a heading)."""
    found, fenced, offset = [], False, 0
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"(#+) (.*)", line)):
            found.append((len(heading.group(1)), heading.group(2).strip(), offset, offset + len(line)))
        offset += len(line)
    return found


def section(title: str, doc: str = "README.md") -> str:
    """A doc's text under a heading, up to the next heading of the same or a higher level."""
    text = DOCS[doc]
    found = headings(text)
    here = next((i for i, (_, name, _, _) in enumerate(found) if name == title), None)
    assert here is not None, f"{doc} has no section {title!r}"
    level, _, _, end = found[here]
    following = [start for depth, _, start, _ in found[here + 1 :] if depth <= level]
    return text[end : following[0] if following else len(text)]


def bullets(text: str) -> list[str]:
    """Each top-level bullet of a list, its continuation lines joined."""
    return [" ".join(item.split()) for item in re.findall(r"^- (.*?)(?=^- |^\n|\Z)", text, flags=re.M | re.S)]


def bold(text: str) -> list[str]:
    return re.findall(r"\*\*(.+?)\*\*", text)


def js_object(path: str, name: str) -> str:
    source = (ROOT / "static" / "js" / path).read_text()
    match = re.search(rf"export const {name} = \{{\n(.*?)\n\}};", source, flags=re.S)
    assert match, f"{path} has no {name}"
    return match.group(1)


def test_the_tour_has_as_many_steps_as_the_readme_says():
    source = (ROOT / "static" / "js" / "tour.js").read_text()
    steps = re.search(r"^const STEPS = \[\n(.*?)^\];", source, flags=re.M | re.S).group(1)
    count = len(re.findall(r"^  \{$", steps, flags=re.M))
    assert count > 10
    claims = [claim for text in DOCS.values() for claim in re.findall(r"in (\d+) steps", text)]
    assert claims and {int(claim) for claim in claims} == {count}


def test_the_sample_lesson_has_as_many_steps_as_the_readme_says():
    steps = len(json.loads((ROOT / "static" / "lessons" / "sample.json").read_text())["steps"])
    words = {"three": 3, "four": 4, "five": 5, "six": 6}
    assert words[re.search(r"has (\w+)\s+steps", section("A class")).group(1)] == steps


def test_the_panels_are_the_pages_panels_in_its_order():
    panels = re.findall(r'^\s+\w+: "([^"]+)",$', js_object("panels.js", "PANELS"), flags=re.M)
    listed = [bold(item)[0] for item in bullets(section("Panels"))]
    assert listed == panels


def test_the_experiments_are_the_pages_experiments_in_its_order():
    lessons = re.findall(r'^\s+\w+: \{ title: "([^"]+)"', js_object("lessons/lessons.js", "LESSONS"), flags=re.M)
    listed = [bold(item)[0] for item in bullets(section("Experiments"))]
    assert listed == lessons


def test_the_measures_are_named_as_declared():
    text = section("Using the page")
    listed = bullets(text[text.index("**The Measure**") :].split("\n\n", 2)[1])
    assert [bold(item)[0] for item in listed] == [MEASURES[key].name for key in get_args(Measure)]
    assert [re.search(r"`([^`]+)`", item).group(1) for item in listed] == [
        MEASURES[key].symbol for key in get_args(Measure)
    ]


def visible_text(start: str, end: str) -> str:
    """The words a reader sees in one region of the page: its markup between two marks, tags dropped
    (aria-labels and titles are not what a newcomer looks for)."""
    region = TEMPLATE[TEMPLATE.index(start) : TEMPLATE.index(end, TEMPLATE.index(start))]
    region = re.sub(r'<[^>]*class="visually-hidden"[^>]*>.*?</\w+>', " ", region, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", region).split())


REGIONS = {
    "The top bar": ('<header class="topbar">', "</header>"),
    "The prompt bar": ('<form id="prompt-form"', "</form>"),
    "The toolbar": ('<div class="toolbar"', '<div id="tour"'),
    "The heatmap": ('<section class="heatmap-column"', "</section>"),
}


@pytest.mark.parametrize("region", REGIONS)
def test_every_control_is_where_the_readme_puts_it(region):
    item = next(item for item in bullets(section("Using the page")) if item.startswith(f"**{region}**"))
    names = bold(item)[1:]
    assert names
    text = visible_text(*REGIONS[region])
    missing = [name for name in names if name not in text]
    assert not missing, f"{region} has no visible {missing}"


def table(text: str) -> dict[str, list[str]]:
    """A Markdown table's rows by their first cell's code, e.g. {"ATTENTION_LAB_PORT": ["`8000`", "…"]}."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `"):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_the_settings_table_is_every_setting_with_its_default():
    rows = table(section("Settings"))
    fields = {ENV_PREFIX + name.upper(): field for name, field in Settings.model_fields.items()}
    assert list(rows) == list(fields), "the table lists every setting, in app/settings.py's order, and no other"
    for variable, (default, meaning) in rows.items():
        expected = fields[variable].default
        assert meaning, variable
        if expected in (None, []):
            assert default == "unset", variable
            continue
        written = re.fullmatch(r"`([^`]+)`", default)
        assert written, f"{variable}: {default!r}"
        value = written.group(1)
        if isinstance(expected, bool | str) or not isinstance(expected, int | float):
            assert value == str(expected), variable
        else:
            assert float(value) == expected, variable


def test_every_setting_the_docs_name_exists():
    named = {name for text in DOCS.values() for name in re.findall(rf"\b{ENV_PREFIX}[A-Z_]+[A-Z]\b", text)}
    assert named - {ENV_PREFIX + name.upper() for name in Settings.model_fields} == set()


def test_the_install_stamp_is_the_makefiles():
    makefile = (ROOT / "Makefile").read_text()
    stamp = re.search(r"^INSTALLED := \$\(VENV\)/(\S+)$", makefile, flags=re.M).group(1)
    assert f"`.venv/{stamp}`" in section("Quick start")


def test_the_benchmarks_are_linked_and_not_repeated():
    assert "(bench/README.md)" in README and (ROOT / "bench" / "README.md").exists()
    assert (
        all("| N | raw forward ms" not in text for text in DOCS.values())
        and "| N | raw forward ms" in (ROOT / "bench" / "README.md").read_text()
    )


def test_every_ready_lesson_is_in_the_readme_by_its_file_and_its_button():
    ready = re.findall(
        r'\["plan-\w+", "([\w-]+\.json)", "([^"]+)"\]', (ROOT / "static/js/class/planner.js").read_text()
    )
    assert sorted(file for file, _ in ready) == sorted(
        path.name for path in (ROOT / "static" / "lessons").glob("*.json")
    )
    text = section("A class")
    for file, label in ready:
        assert f"(static/lessons/{file})" in text and f"**{label}**" in " ".join(text.split()), (file, label)


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def anchors(text: str) -> Iterator[str]:
    seen: dict[str, int] = {}
    for _, title, _, _ in headings(text):
        slug = anchor(title)
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def prose(text: str) -> str:
    """A Markdown text without its fenced code."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


@pytest.mark.parametrize("doc", DOCS)
def test_every_relative_link_leads_to_a_file_and_a_heading(doc):
    links = re.findall(r"\]\(([^)\s]+)\)|(?:src|href)=\"([^\"]+)\"", prose(DOCS[doc]))
    targets = [a or b for a, b in links]
    assert targets
    broken = []
    for target in targets:
        if re.match(r"[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        file = (ROOT / doc).parent / path if path else ROOT / doc
        if not file.exists():
            broken.append(target)
        elif fragment and (file.suffix != ".md" or fragment not in set(anchors(file.read_text()))):
            broken.append(target)
    assert not broken, f"{doc} links to no file or heading: {broken}"


def test_the_families_table_is_the_families_the_lab_reads():
    """One row per family file, in app/engine/families' order, by its name and model types; then a row for
    every other family."""
    text = section("The families read exactly", "docs/models.md")
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")
    ]
    *families, other = rows[2:]
    assert len(families) == len(FAMILIES) and other[1] == "its own"
    for (name, types, *_), family in zip(families, FAMILIES, strict=True):
        assert name.startswith(family.name), (name, family.name)
        assert re.findall(r"`([\w-]+)`", types)[: len(family.model_types)] == list(family.model_types), name


def js_list(path: str, name: str) -> list[str]:
    source = (ROOT / "static" / "js" / path).read_text()
    match = re.search(rf"^(?:export )?const {name} = \[(.*?)\];", source, flags=re.M)
    assert match, f"{path} has no {name}"
    return re.findall(r'"([^"]+)"', match.group(1))


def test_the_lesson_plan_format_is_what_the_planner_reads():
    text = DOCS["docs/lesson-plans.md"]
    example = json.loads(re.search(r"```json\n(.*?)```", text, flags=re.S).group(1))
    source = (ROOT / "static" / "js" / "class" / "plan.js").read_text()
    assert example["format"] == re.search(r'PLAN_FORMAT = "([^"]+)"', source).group(1)
    prose = " ".join(text.split())
    keys = re.search(r"`view` takes a link's parameters \((.*?)\)", prose).group(1)
    assert sorted(re.findall(r"`(\w+)`", keys)) == sorted(js_list("class/plan.js", "STEP_KEYS"))
    kinds = re.findall(r'\{"kind": "(\w+)"', prose)
    assert sorted(set(kinds)) == sorted(js_list("class/plan.js", "QUESTION_KINDS"))
    patterns = re.search(r'"pattern": "(\w+)"\}` \(or (.*?)\)', prose)
    assert [patterns.group(1), *re.findall(r'"(\w+)"', patterns.group(2))] == js_list("class/plan.js", "PATTERNS")
    assert re.findall(r'"by": "(\w+)"', prose) == js_list("class/plan.js", "PATCH_BY")
    assert re.findall(r'`"test"` is `"(\w+)"` or `"(\w+)"`', prose) == [tuple(js_list("class/plan.js", "TESTS"))]


def test_the_readme_leads_to_every_doc():
    unlinked = [doc for doc in DOCS if doc.startswith("docs/") and f"]({doc}" not in README]
    assert not unlinked, f"the README never links to {unlinked}"


def code_map() -> list[str]:
    """The folders the developers' code map names, as `app/engine/`."""
    return re.findall(r"^\| `([^`]+/)` \|", section("For developers"), flags=re.M)


def test_the_code_map_names_every_folder_of_code_and_only_folders_that_are():
    named = code_map()
    assert len(named) == len(set(named)), "a folder is named twice"
    assert not [folder for folder in named if not (ROOT / folder).is_dir()], "the map names a folder that is not"

    def made_here(path: Path) -> bool:
        """Not a folder a tool or a run makes (the venv, caches, the data folder, screenshots, npm's)."""
        parts = path.relative_to(ROOT).parts
        return not any(
            part in {"data", "test-artifacts", "__pycache__", "node_modules"}
            or part.endswith(".egg-info")
            or (part.startswith(".") and part != ".ci")
            for part in parts
        )

    top = [path for path in ROOT.iterdir() if path.is_dir() and made_here(path)]
    code = {
        path.parent
        for pattern in ("*.py", "*.js")
        for path in ROOT.rglob(pattern)
        if made_here(path) and path.parent != ROOT
    }
    missing = [
        f"{folder.relative_to(ROOT).as_posix()}/"
        for folder in sorted(set(top) | code)
        if f"{folder.relative_to(ROOT).as_posix()}/" not in named
        and not (folder in top and any(name.startswith(f"{folder.name}/") for name in named))
    ]
    assert not missing, f"the README's code map leaves out {missing}"


def test_the_quick_test_commands_name_what_the_suite_has():
    commands = re.search(r"```sh\n(.*?)```", section("For developers"), flags=re.S).group(1)
    marker = re.search(r'-m "not (\w+)"', commands).group(1)
    assert any(line.startswith(f"{marker}:") for line in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"])
    for path in re.findall(r"(tests/\S+\.py)", commands):
        assert (ROOT / path).is_file(), path
