"""The docs are checked where they show a command or a link.

- Every command line of a script (``python run_*.py ...``, ``python
  find_max_examples_given_max_window.py ...``) in a code block or an inline code span of
  README.md or docs/*.md uses only flags that the script's own parser has (the parser is
  imported, no model is loaded); ``run_sweep.py`` also takes every ``run_experiment.py`` flag,
  and its ``--grid`` names must be ``run_experiment.py`` flags. A command with ``--plugin`` also
  takes the flags the plugins under tests/data/plugins declare (read from ``--help`` with them).
- Every ``make TARGET`` names a target of the Makefile.
- Every relative link points to an existing file and, with ``#anchor``, to a heading of it.
- Every pointer in the package's messages, help texts and docstrings, the scripts, the Makefile,
  the bench files and the docs' prose (``README: Data``, ``docs/method.md, "Beyond the paper"``,
  ``docs/tasks.md``) names a file that exists and, with a section, a heading of it.
- README.md stays at most 250 lines.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 250

# Where each script's parser lives: candidates tried in order (the package is being reorganised;
# the first that imports wins). A script missing here, or none of its candidates importing, fails.
PARSERS = {
    "run_experiment.py": [("icrl.cli", "build_parser")],
    "run_sweep.py": [("icrl.cli.sweep", "build_parser")],
    "run_draw_plots.py": [("icrl.cli.figures", "build_parser")],
    "run_count_tokens.py": [("icrl.cli.tokens", "build_parser")],
    "find_max_examples_given_max_window.py": [("icrl.cli.window", "build_parser")],
    "run_view.py": [("icrl.cli.view", "build_parser")],
    "run_report.py": [("icrl.cli.report", "build_parser")],
    "icrl.standin": [("icrl.cli.standin", "build_parser")],  # python -m icrl.standin
}
SCRIPT = re.compile(r"^(?:\./)?(run_\w+\.py|find_max_examples_given_max_window\.py)$")
SHELL_STOP = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>&1", "2>", "1>"}


# ------------------------------------------------------------------ reading the docs ------

def code_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, body) of each fenced code block."""
    blocks, body, start, fence = [], [], 0, None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence, start, body = "```", number + 1, []
        elif fence is not None and stripped.startswith("```"):
            blocks.append((start, "\n".join(body)))
            fence = None
        elif fence is not None:
            body.append(line)
    return blocks


def inline_spans(text: str) -> list[tuple[int, str]]:
    """(line number, content) of inline code spans outside fenced blocks."""
    spans, inside = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            spans += [(number, m.group(1)) for m in re.finditer(r"`([^`]+)`", line)]
    return spans


def command_lines(body: str) -> list[str]:
    """The shell lines of a code block, continuations joined, prompts ('$ ') removed."""
    lines, pending = [], ""
    for raw in body.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append((pending + line).strip())
        pending = ""
    if pending:
        lines.append(pending.strip())
    return [line[2:] if line.startswith("$ ") else line for line in lines]


def invocations(line: str) -> list[tuple[str, list[str]]]:
    """(script or 'make', its words) for each command on a shell line."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # not shell (e.g. a TOML or Python line with an odd quote)
        return []
    found, i = [], 0
    while i < len(words):
        word = words[i]
        script = None
        if word in ("python", "python3") and i + 1 < len(words) and SCRIPT.match(words[i + 1]):
            script, i = SCRIPT.match(words[i + 1]).group(1), i + 2
        elif word in ("python", "python3") and words[i + 1:i + 3] == ["-m", "icrl.standin"]:
            script, i = "icrl.standin", i + 3  # its command after "--" is a command of its own
        elif SCRIPT.match(word):
            script, i = SCRIPT.match(word).group(1), i + 1
        elif word == "make" and (i == 0 or words[i - 1] in SHELL_STOP):  # make as a command, not prose
            script, i = "make", i + 1
        else:
            i += 1
            continue
        args = []
        while i < len(words) and words[i] not in SHELL_STOP and not words[i].startswith((">", "2>")) \
                and not (script == "icrl.standin" and words[i] == "--"):
            args.append(words[i])
            i += 1
        found.append((script, args))
    return found


def doc_commands() -> list[tuple[str, str, list[str]]]:
    """(where, script, words) of every command shown in README.md and docs/*.md."""
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(REPO)
        for start, body in code_blocks(text):
            for line in command_lines(body):
                out += [(f"{name}:{start} `{line[:60]}`", s, w) for s, w in invocations(line)]
        for number, span in inline_spans(text):
            if re.match(r"^(python3? )?\S+\.py\s+-|^make\s", span):
                out += [(f"{name}:{number} `{span[:60]}`", s, w) for s, w in invocations(span)]
    return out


# ------------------------------------------------------------------ the real parsers ------

def load_parser(script: str) -> argparse.ArgumentParser:
    tried = []
    for module_name, attribute in PARSERS.get(script, []):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            tried.append(module_name)
            continue
        if hasattr(module, attribute):
            return getattr(module, attribute)()
        tried.append(f"{module_name}.{attribute}")
    pytest.fail(f"no parser found for {script} (tried {tried}); update PARSERS in tests/unit/test_docs.py")


def option_names(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


@functools.lru_cache(maxsize=None)
def plugin_flags() -> frozenset:
    """The flags the plugins under tests/data/plugins add to run_experiment.py (a plugin loads
    before the parser is built, so in a process of its own)."""
    plugins = ":".join(str(p) for p in sorted((REPO / "tests" / "data" / "plugins").iterdir())
                       if p.suffix == ".py" or (p / "__init__.py").is_file())
    helped = subprocess.run([sys.executable, str(REPO / "run_experiment.py"), "--help"], cwd=REPO, text=True,
                            capture_output=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO), "ICRL_PLUGINS": plugins})
    assert helped.returncode == 0, helped.stderr
    return frozenset(re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", helped.stdout))


def bad_flags(script: str, words: list[str]) -> list[str]:
    """The flags in ``words`` that the script's parser does not know (exact names only)."""
    known = option_names(load_parser(script))
    if "--plugin" in words:
        known |= plugin_flags()
    if script == "run_sweep.py":
        experiment = option_names(load_parser("run_experiment.py"))
        known |= experiment
    bad = [w.split("=", 1)[0] for w in words if w.startswith("-") and not re.match(r"^-\d", w)
           and w != "--" and w.split("=", 1)[0] not in known]
    if script == "run_sweep.py":  # --grid FLAG[+FLAG]=V1,V2: each FLAG a run_experiment.py flag
        for flag, value in zip(words, words[1:]):
            if flag == "--grid" and "=" in value:
                bad += [f"--grid {n}" for n in value.split("=", 1)[0].split("+") if f"--{n}" not in experiment]
    return bad


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return {t for m in re.finditer(r"^([A-Za-z0-9_.\- ]+):(?!=)", text, re.M) for t in m.group(1).split()}


# ------------------------------------------------------------------ links and anchors ------

def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces -> '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    inside = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("```"):
            inside = not inside
            continue
        m = None if inside else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            out.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return out


def relative_links(path: Path) -> list[tuple[int, str]]:
    links, inside = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            inside = not inside
            continue
        if inside:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", line):
            target = m.group(1)
            if not re.match(r"^[a-z][a-z0-9+.\-]*:", target):  # not http:, https:, mailto:
                links.append((number, target))
    return links


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    broken = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number} -> {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where} (no such heading)")
    return broken


# ------------------------------------------------------------------ pointers in prose ------

# "README: Data", "docs/method.md, \"Beyond the paper\"", "(docs/tasks.md)", "evidence.md, \"All methods\""
POINTER = re.compile(r"(?<![\w/.-])(README|(?:docs/)?[a-z_]+\.md)"
                     r"(?::\s+([A-Z][\w' -]*[\w'])|,\s*\\?\"([^\"\\]+)\\?\")?")
POINTER_SOURCES = [*sorted((REPO / "icrl").rglob("*.py")), *sorted(REPO.glob("*.py")), REPO / "Makefile",
                   *sorted((REPO / "bench").rglob("*.py")), *sorted((REPO / "bench").rglob("*.toml")),
                   REPO / "data" / "README.md", *DOCS]


def heading_texts(path: Path) -> list[str]:
    """The headings of a Markdown file, lower case, markup dropped."""
    out, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("```"):
            inside = not inside
        elif not inside and re.match(r"^#{1,6}\s", line):
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line.lstrip("#").strip())
            out.append(text.replace("`", "").lower())
    return out


def broken_pointers(path: Path, root: Path = REPO) -> list[str]:
    """Pointers in ``path`` to a file that does not exist or a section it does not have (a
    section names the start of a heading: "Beyond the paper" matches "Beyond the paper: ...")."""
    broken = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for m in POINTER.finditer(line):
            name, section = m.group(1), m.group(2) or m.group(3)
            target = root / "README.md" if name == "README" else root / (name if "/" in name else f"docs/{name}")
            if name.endswith(".md") and "/" not in name and path.parent != root / "docs" and not target.exists():
                target = path.parent / name
            where = f"{path.relative_to(root)}:{number}: {m.group(0)}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
            elif section and not any(h.startswith(section.lower()) for h in heading_texts(target)):
                broken.append(f"{where} (no heading {section!r} in {target.relative_to(root)})")
    return broken


# ------------------------------------------------------------------ the tests ------

COMMANDS = doc_commands()


def test_the_docs_show_commands_of_every_script():
    shown = {script for _, script, _ in COMMANDS}
    assert set(PARSERS) | {"make"} <= shown, f"not shown in any doc: {set(PARSERS) | {'make'} - shown}"


@pytest.mark.parametrize("where,script,words", [c for c in COMMANDS if c[1] != "make"],
                         ids=[c[0] for c in COMMANDS if c[1] != "make"])
def test_command_flags_exist(where, script, words):
    assert not bad_flags(script, words), f"{where}: {script} has no flag {bad_flags(script, words)}"


def test_flags_in_prose_exist():
    """An inline code span that starts with a flag (`--icrl --context_p_keep 0.1`, a table of
    methods) uses flags of this project's scripts; spans that start with another command
    (`pip install --no-deps`, `ray start --head`) are that command's business."""
    known = set().union(*(option_names(load_parser(script)) for script in PARSERS), plugin_flags())
    wrong = []
    for path in DOCS:
        for number, span in inline_spans(path.read_text(encoding="utf-8")):
            if span.startswith("--"):
                wrong += [f"{path.relative_to(REPO)}:{number}: {flag}"
                          for flag in re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", span) if flag not in known]
    assert not wrong, f"no script has these flags: {wrong}"


def test_make_targets_exist():
    targets = make_targets()
    wrong = [f"{where}: make {w}" for where, script, words in COMMANDS if script == "make"
             for w in words if not w.startswith("-") and "=" not in w and w not in targets]
    assert not wrong, f"no such Makefile target: {wrong}"


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_relative_links_resolve(path):
    assert not broken_links(path), "\n".join(broken_links(path))


def test_pointers_name_sections_that_exist():
    broken = [b for path in POINTER_SOURCES for b in broken_pointers(path)]
    assert not broken, "\n".join(broken)


def test_readme_links_every_page():
    linked = {target.partition("#")[0] for _, target in relative_links(REPO / "README.md")}
    missing = [str(p.relative_to(REPO)) for p in DOCS[1:] if str(p.relative_to(REPO)) not in linked]
    assert not missing, f"README.md does not link {missing}"


def test_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


# The checks themselves must be able to fail: a wrong flag, a wrong target, a broken link.

def test_a_wrong_flag_is_caught():
    [(script, words)] = invocations("python run_experiment.py --task_name banking77 --temprature 1.0")
    assert bad_flags(script, words) == ["--temprature"]
    [(script, words)] = invocations("python run_sweep.py --grid seeds=1,2 --icrl")
    assert bad_flags(script, words) == ["--grid seeds"]
    assert bad_flags("find_max_examples_given_max_window.py", ["--model_name", "m", "--window", "4096"]) == ["--window"]


def test_a_wrong_target_and_a_broken_link_are_caught(tmp_path):
    assert "demo" in make_targets() and "tests" not in make_targets()
    page = tmp_path / "page.md"
    page.write_text("# A `tool`: here\n[ok](#a-tool-here) [bad](#nowhere) [gone](missing.md)\n")
    assert [b.split(" -> ")[1] for b in broken_links(page, root=tmp_path)] == [
        "#nowhere (no such heading)", "missing.md (no such file)"]


def test_a_pointer_to_a_missing_section_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Title\n## Data\n")
    (tmp_path / "docs" / "method.md").write_text("## Beyond the paper: rewards\n")
    source = tmp_path / "m.py"
    source.write_text('msg = "see (README: Data) and (README: Records)"\n'
                      'doc = "docs/method.md, \\"Beyond the paper\\"; docs/method.md, \\"Beyond the sea\\""\n'
                      "# docs/nowhere.md\n")
    assert [b.split(": ", 1)[1] for b in broken_pointers(source, root=tmp_path)] == [
        "README: Records (no heading 'Records' in README.md)",
        'docs/method.md, \\"Beyond the sea\\" (no heading \'Beyond the sea\' in docs/method.md)',
        "docs/nowhere.md (no such file)"]
