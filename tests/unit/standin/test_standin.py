"""``python -m icrl.standin``: a stand-in of each hosted API on 127.0.0.1 that prints what to set, runs
a command with it set, stops on Ctrl-C, and refuses bad options in one line."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from helpers import REPO

from icrl.standin import STANDINS, default_models, start_standin
from icrl.standin.__main__ import main


@pytest.mark.waits
@pytest.mark.parametrize("api", list(STANDINS))
def test_a_command_runs_with_the_standins_url_and_key_set(api, capfd):
    standin = STANDINS[api]
    show = f"import os; print(os.environ['{standin.url_variable}'], os.environ['{standin.key_variable}'])"
    assert main([api, "--", sys.executable, "-c", show]) == 0
    url, key = capfd.readouterr().out.split()  # the command's output; the stand-in's lines go to stderr
    assert url.startswith("http://127.0.0.1:") and key == standin.key
    assert main([api, "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3  # the command's exit code


def test_it_serves_127_0_0_1_only_the_providers_priced_models():
    with start_standin("anthropic") as server:
        assert server.httpd.server_address[0] == "127.0.0.1"
        assert server.models == default_models("anthropic") and "claude-haiku-4-5" in server.models
    assert all(name.startswith("gemini-") for name in default_models("gemini"))


def test_it_prints_what_to_set_and_stops_on_ctrl_c():
    proc = subprocess.Popen([sys.executable, "-m", "icrl.standin", "gemini", "--model", "gemini-2.5-flash"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        lines = [proc.stdout.readline() for _ in range(5)]
        assert lines[0].startswith("stand-in for Google's Gemini API at http://127.0.0.1:"), lines
        assert lines[1] == "models: gemini-2.5-flash\n"
        assert lines[2].startswith("set: export GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:") and "GEMINI_API_KEY=" in lines[2]
        assert lines[3].startswith("or give: --backend gemini --base_url http://127.0.0.1:")
        assert lines[4] == "Ctrl-C stops it\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert proc.stderr.read() == "stand-in stopped\n"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("words, said", [
    (["openai", "--window", "40"], "--window is the input window the anthropic or gemini stand-in reports"),
    (["gemini", "--window", "0"], "--window is the input window"),
    (["gemini", "--port", "70000"], "--port must be from 0 (a free one) to 65535, got 70000"),
    (["gemini", "--"], "nothing after --: give the command to run"),
    (["vertex"], "argument api: invalid choice: 'vertex'"),
    (["gemini", "--silent", "--stuck"], "not allowed with argument"),
])
def test_bad_options_are_one_line(words, said, capsys):
    assert main(words) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and said in err[0], err


def test_a_port_taken_is_one_line(capsys):
    with start_standin("openai") as server:
        assert main(["openai", "--port", str(server.port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: cannot listen on 127.0.0.1:{server.port} (Address already in use); give another --port "
                   f"or 0"], err


@pytest.mark.waits
def test_silent_accepts_and_answers_nothing():
    import socket

    with start_standin("anthropic", silent=True) as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}"
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
            conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            conn.settimeout(1.0)
            with pytest.raises(socket.timeout):
                conn.recv(1)
