"""A run's data (icrl.run.data): a split smaller than asked is a warning and is recorded."""

from __future__ import annotations

from helpers import tiny_argv
from icrl.cli import parse_args
from icrl.run.data import load_data


def test_oversized_splits_warn_and_are_recorded(tmp_path, capsys):
    args = parse_args(tiny_argv(tmp_path, "--train_k", "100000", "--test_k", "100000"))
    data = load_data(args)
    err = capsys.readouterr().err
    assert "--train_k 100000" in err and "--test_k 100000" in err and "warning" in err
    assert len(data.test) == 24 and len(data.train) == 91

