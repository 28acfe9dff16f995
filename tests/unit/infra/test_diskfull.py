"""A full disk (icrl.infra.diskfull): one line, exit 2, and the same command resumes the run."""

from __future__ import annotations

import errno

from helpers import tiny_argv
from icrl.cli.run import main


def test_disk_full_mid_run_is_one_line_and_resumable(tmp_path, capsys, monkeypatch):
    from icrl.records import RunRecords

    real = RunRecords.append_train

    def full(self, line):
        if line.step == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.directory / "train.jsonl"))
        return real(self, line)

    monkeypatch.setattr(RunRecords, "append_train", full)
    assert main(tiny_argv(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert "No space left on device" in err and "\n" not in err
    monkeypatch.setattr(RunRecords, "append_train", real)
    assert main(tiny_argv(tmp_path)) == 0
    assert "resuming" in capsys.readouterr().err

