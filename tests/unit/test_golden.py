"""Golden outputs: today's scripts, re-run, must give exactly the frozen records and output.

Each case of tests/golden/cases.py runs its commands in a fresh folder and compares the
normalized result (exit codes, stdout, stderr, every file's records) with
tests/golden/records/<case>.json (the real models' cases: their floats within 5e-6, which other
CPUs round otherwise); --help of the five scripts and run_sweep.py --dry_run of
the presets are compared with tests/golden/help/ and tests/golden/dry_run/. A difference is
a change of behaviour: fix it, or (only for a deliberate, documented change) regenerate with
``python tests/golden/freeze.py`` and say why in the commit.
"""

from __future__ import annotations

import pytest

from golden import cases


@pytest.fixture
def data_env(request, monkeypatch):
    """The raw datasets for the cases on a dataset (skipped without them); the toy task's cases
    (tests/data/toy) need none."""
    if not request.node.callspec.params.get("name", "").startswith("toy"):
        monkeypatch.setenv("ICRL_DATA_DIR", str(request.getfixturevalue("data_dir")))
    monkeypatch.delenv(cases.INTERRUPT_ENV, raising=False)
    monkeypatch.delenv("ICRL_FAKE_DELAY_S", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _same(a, b) -> bool:
    """Equal as canonical JSON: key order is free, types are not (6 is not 6.0, true is not 1)."""
    return cases.dump(a) == cases.dump(b)


def _floats(data, replace):
    """``data`` with each float replaced by ``replace(float)``."""
    if isinstance(data, float):
        return replace(data)
    if isinstance(data, dict):
        return {key: _floats(value, replace) for key, value in data.items()}
    if isinstance(data, list):
        return [_floats(value, replace) for value in data]
    return data


def _near(data):
    """``data`` with each float made pytest.approx of itself (within 5e-6). A real model's floats in
    the records (knn_embedding's cosine scores, printed to 6 decimals) can differ in the last digit
    between CPUs of other instruction sets (AVX-512 may sum in another order than AVX2)."""
    return _floats(data, lambda x: pytest.approx(x, rel=0, abs=5e-6))


def _typed(data):
    """``data`` with each float's value dropped and its type kept, for the type check beside _near."""
    return _floats(data, lambda x: "<float>")


def _compare(name: str, got: dict, model: bool = False) -> None:
    """Exactly equal; with ``model`` (a real model's case), floats in the records within 5e-6."""
    want = cases.load_golden(name)
    for i, (g, w) in enumerate(zip(got["commands"], want["commands"])):
        assert g == w and _same(g, w), f"{name}: command {i} ({w['command']}) differs"
    assert len(got["commands"]) == len(want["commands"])
    assert sorted(got["files"]) == sorted(want["files"]), f"{name}: other files"
    near, typed = (_near, _typed) if model else (lambda x: x, lambda x: x)
    for path, records in want["files"].items():
        assert got["files"][path] == near(records), f"{name}: {path} differs"
        assert _same(typed(got["files"][path]), typed(records)), f"{name}: {path}: a value changed type"


@pytest.mark.parametrize("name", list(cases.CASES))
def test_golden_records(name, data_env, tmp_path):
    got = cases.snapshot(cases.CASES[name], tmp_path / "case")
    _compare(name, got)
    if name in cases.SAME_FILES_AS:  # a resumed run leaves what the uninterrupted one leaves
        assert _same(got["files"], cases.load_golden(cases.SAME_FILES_AS[name])["files"])


@pytest.mark.model
@pytest.mark.parametrize("name", list(cases.MODEL_CASES))
def test_golden_records_real_model(name, data_env, tmp_path):
    _compare(name, cases.snapshot(cases.MODEL_CASES[name], tmp_path / "case"), model=True)


@pytest.mark.parametrize("script", list(cases.SCRIPTS))
def test_golden_help(script):
    assert cases.help_text(script) == (cases.HELP / f"{script}.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("preset", cases.PRESET_NAMES)
def test_golden_dry_run(preset):
    assert cases.dry_run_text(preset) == (cases.DRY_RUN / f"{preset}.txt").read_text(encoding="utf-8")


def test_goldens_cover_every_case():
    """Every case has its golden and every golden its case (a renamed case cannot go unchecked)."""
    frozen = {p.stem for p in cases.RECORDS.glob("*.json")}
    assert frozen == set(cases.CASES) | set(cases.MODEL_CASES)
