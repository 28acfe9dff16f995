"""A run read back for the readers (icrl.run.readback): the verdict a resume gives, for every damage
the records' schema allows (each field of each line and of config.json, generated from the schema,
not listed by hand), in memory; the readers' lines are the lines the resume writes back."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from helpers import REPO, tiny_argv, untimed
from icrl.cli.run import main
from icrl.config import RunOptions, RunSpec
from icrl.records import DamagedRecords
from icrl.records.configfile import ConfigFile
from icrl.records.schema import TestLine, TrainLine
from icrl.records.typed import fits, hints, is_record_class, json_name
from icrl.run.readback import read_run

CANDIDATES: tuple = (None, True, "x", 7, 1.5, [], {}, [["x"]])


def wrong_value(annotation: Any) -> Any:
    """A JSON value of another type than ``annotation`` admits (None where it admits any)."""
    return next((value for value in CANDIDATES if not fits(value, annotation)), None)


REMOVE = object()


def damages_of(annotation: Any, removable: bool = True) -> dict[str, Any]:
    """name -> what to put in place of a field of type ``annotation`` (``REMOVE``: take it out)."""
    out: dict[str, Any] = {}
    wrong = wrong_value(annotation)
    if wrong is not None or not fits(None, annotation):
        out["of another type"] = wrong
    if fits(1.5, annotation) and not fits("x", annotation):
        out["NaN"] = math.nan
        out["infinite"] = math.inf
    if removable:
        out["removed"] = REMOVE
    return out


def _fields(cls: type) -> list[tuple[str, Any]]:
    """(JSON name, annotation) of a dataclass's fields."""
    types = hints(cls)
    return [(json_name(f), types[f.name]) for f in dataclasses.fields(cls)
            if not f.metadata.get("extra") and f.name != "answers"]


def config_damages() -> list[tuple[str, Any]]:
    """(dotted path in config.json, replacement) for every field config.json's schema names:
    each section's fields (a section's dataclass, RunSpec's for args, RunOptions' for
    runtime_args), the first item of its lists of records (exemplars have none in the tiny run)."""
    out = []

    def walk(cls: type, prefix: str) -> None:
        for name, annotation in _fields(cls):
            path = f"{prefix}{name}"
            for what, value in damages_of(annotation).items():
                out.append((f"{path} {what}", value))
            inner = typing.get_args(annotation)[0] if typing.get_origin(annotation) is list else annotation
            if is_record_class(inner) and typing.get_origin(annotation) is not list:
                walk(inner, f"{path}.")

    walk(ConfigFile, "")
    for section, cls in (("args", RunSpec), ("runtime_args", RunOptions)):
        for name, annotation in hints(cls).items():
            for what, value in damages_of(Optional[annotation], removable=False).items():
                out.append((f"{section}.{name} {what}", value))
    out += [("duplicate key args", "DUPLICATE"), ("unknown key", "UNKNOWN")]
    return out


def line_damages(cls: type) -> list[tuple[str, Any]]:
    return [(f"{name} {what}", value) for name, annotation in _fields(cls) for what, value in damages_of(annotation).items()]


def _apply_config(path: Path, damage: str, value: Any) -> None:
    text = path.read_text()
    if value == "DUPLICATE":
        path.write_text(text.replace('"args": {', '"args": {"seed": 9}, "args": {', 1))
        return
    config = json.loads(text)
    if value == "UNKNOWN":
        config["colour"] = "red"
    else:
        *parents, last = damage.split(" ")[0].split(".")
        target = config
        for part in parents:
            target = target[part]
        if value is REMOVE:
            target.pop(last, None)
        else:
            target[last] = value
    path.write_text(json.dumps(config))


def _apply_line(path: Path, number: int, damage: str, value: Any) -> None:
    lines = path.read_text().splitlines()
    record = json.loads(lines[number - 1])
    name = damage.split(" ")[0]
    if value is REMOVE:
        record.pop(name, None)
    else:
        record[name] = value
    lines[number - 1] = json.dumps(record)
    path.write_text("".join(line + "\n" for line in lines))


def verdicts(finished, capsys, apply: Callable[[Path], None]) -> tuple:
    """(the reader's verdict, the resume's): ("refused", its line) or ("read", lines shown) for
    the reader; ("refused", its line) or ("resumed", the lines written) for the resume."""
    out, run_dir, _ = finished
    apply(run_dir)
    try:
        run = read_run(run_dir)
        reader: tuple = ("read", untimed([r.as_json() for r in run.train]), untimed([r.as_json() for r in run.test]),
                         run.finished)
    except DamagedRecords as exc:
        reader = ("refused", str(exc))
    capsys.readouterr()
    code = main(tiny_argv(out))
    err = capsys.readouterr().err.strip()
    if code == 2:
        assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
        return reader, ("refused", err[len("error: "):])
    assert code == 0, err
    lines = [untimed([json.loads(x) for x in (run_dir / name).read_text().splitlines()])
             for name in ("train.jsonl", "test.jsonl")]
    start = re.search(r"resuming .* at step (\d+) of", err)
    return reader, ("resumed", *lines, "repair" not in err and start is None, int(start.group(1)) if start else None)


def _agree(reader: tuple, resume: tuple, finished) -> None:
    if resume[0] == "refused":
        assert reader == resume, (reader, resume)
        return
    assert reader[0] == "read", reader
    whole_train, whole_test = finished[2]
    assert list(resume[1:3]) == [whole_train, whole_test]
    assert reader[3] == resume[3], (reader[3], resume[3])  # finished as it was, or repaired by both
    if reader[3]:
        assert [reader[1], reader[2]] == [whole_train, whole_test]
    else:  # the reader shows what the resume continued from: its steps, less the test steps it recomputes
        assert len(reader[1]) == resume[4] and reader[1] == whole_train[:resume[4]], (len(reader[1]), resume[4])
        assert all(line in whole_test for line in reader[2])


@pytest.mark.parametrize("damage, value", config_damages(), ids=[d for d, _ in config_damages()])
def test_a_damaged_config_json_gets_the_resumes_verdict_from_the_readers(finished, capsys, damage, value):
    reader, resume = verdicts(finished, capsys, lambda run_dir: _apply_config(run_dir / "config.json", damage, value))
    _agree(reader, resume, finished)


@pytest.mark.parametrize("name, cls, number", [("train.jsonl", TrainLine, 3), ("train.jsonl", TrainLine, 6),
                                               ("test.jsonl", TestLine, 2)])
def test_a_damaged_line_gets_the_resumes_verdict_from_the_readers(finished, capsys, name, cls, number):
    """Every field of a line, in the middle of the file and (training) as its last line."""
    _, run_dir, _ = finished
    backup = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    wrong = []
    for damage, value in line_damages(cls):
        reader, resume = verdicts(finished, capsys, lambda d: _apply_line(d / name, number, damage, value))
        try:
            _agree(reader, resume, finished)
        except AssertionError as exc:
            wrong.append(f"{name} line {number}: {damage}: {exc}")
        for file, data in backup.items():
            (run_dir / file).write_bytes(data)
        for extra in set(p.name for p in run_dir.iterdir() if p.is_file()) - set(backup):
            (run_dir / extra).unlink()
    assert not wrong, "\n".join(wrong)


def test_the_verdicts_are_refusals_and_repairs_alike(finished, capsys):
    """The generated damages hold both verdicts (a test that could not tell them apart would pass
    on readers that accept everything): a NaN temperature and a format version of 99 are refused,
    a NaN feedback repaired."""
    out, run_dir, _ = finished
    backup = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}

    def restore():
        for file, data in backup.items():
            (run_dir / file).write_bytes(data)

    for damage, value, said in (("args.temperature NaN", math.nan, "args.temperature"),
                                ("format_version", 99, "format_version is 99")):
        reader, resume = verdicts(finished, capsys, lambda d: _apply_config(d / "config.json", damage, value))
        assert reader[0] == resume[0] == "refused" and said in reader[1] and reader == resume
        restore()
    reader, resume = verdicts(finished, capsys, lambda d: _apply_line(d / "train.jsonl", 3, "feedback", math.nan))
    assert reader[0] == "read" and not reader[3] and resume[0] == "resumed" and not resume[3]
    assert reader[1] == resume[1]  # repaired alike


def test_a_finished_run_reads_back_as_its_types(finished):
    _, run_dir, (train, test) = finished
    run = read_run(run_dir)
    assert run.finished and run.damage == "" and run.steps_done == 6 and run.directory == run_dir and run.checked
    assert all(isinstance(r, TrainLine) for r in run.train) and all(isinstance(r, TestLine) for r in run.test)
    assert untimed([r.as_json() for r in run.train]) == train and untimed([r.as_json() for r in run.test]) == test


def test_without_its_data_a_run_is_read_from_its_records_alone(finished, monkeypatch, tmp_path):
    """No raw files at hand: the lines as they parse, and what config.json alone shows wrong."""
    _, run_dir, (train, _) = finished
    monkeypatch.setattr("icrl.run.readback.data_at_hand", lambda name: False)
    run = read_run(run_dir)
    assert not run.checked and "not at hand" in run.unchecked and run.finished
    assert untimed([r.as_json() for r in run.train]) == train
    lines = (run_dir / "train.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["accuracy"] = 1 - record["accuracy"]
    lines[1] = json.dumps(record)
    (run_dir / "train.jsonl").write_text("".join(x + "\n" for x in lines))
    run = read_run(run_dir)
    assert not run.finished and "training step 1's accuracy" in run.damage


def test_a_line_nested_too_deep_is_not_json_to_the_reader_and_the_resume(finished, capsys):
    out, run_dir, _ = finished
    lines = (run_dir / "train.jsonl").read_text().splitlines()
    lines[2] = '{"step": 2, "metrics": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (run_dir / "train.jsonl").write_text("".join(x + "\n" for x in lines))
    with pytest.raises(DamagedRecords, match="train.jsonl line 3 is not JSON"):
        read_run(run_dir)
    assert main(tiny_argv(out)) == 2
    assert "train.jsonl line 3 is not JSON" in capsys.readouterr().err
    assert REPO.is_dir()
