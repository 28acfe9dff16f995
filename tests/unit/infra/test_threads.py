"""torch's threads (icrl.infra.threads): a passive wait policy, and one thread per idle CPU on a
busy machine, unless the user chose; set by every entry point before torch (or the package's
commands, which load it) is imported."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from helpers import REPO
from icrl.errors import UsageError
from icrl.infra import threads

ENTRY_POINTS = sorted(p.name for p in [*REPO.glob("run_*.py"), REPO / "find_max_examples_given_max_window.py"])

# Runs a root script with --help and stops it at the first import of torch or of the package's
# commands (icrl.cli, icrl.sweep: what loads torch), printing the wait policy set at that moment.
PROBE = """
import os, runpy, sys

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith(("icrl.cli", "icrl.sweep")):
            print("at", name, "OMP_WAIT_POLICY", os.environ.get("OMP_WAIT_POLICY"),
                  "OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS"), flush=True)
            os._exit(0)
        return None

sys.meta_path.insert(0, Watch())
sys.argv = [sys.argv[1], "--help"]
runpy.run_path(sys.argv[0], run_name="__main__")
print("reached the end without importing torch or icrl.cli/icrl.sweep", flush=True)
"""


def clean_env(**extra) -> dict:
    """This process's environment less any wait policy (the test suite sets one itself)."""
    chosen = (*threads.USER_VARIABLES, threads.CHOICE, threads.THREADS_CHOICE, "OMP_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in chosen}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def probe(script: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, str(REPO / script)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_passive_and_torchs_threads_on_a_quiet_machine():
    env = {}
    assert threads.configure(env, load=0.9, cpus=2) == "OMP_WAIT_POLICY=PASSIVE, torch's thread count"
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}


@pytest.mark.parametrize("load, cpus, expected", [(1.0, 2, "1"), (7.5, 2, "1"), (8.0, 16, "8"), (10.6, 16, "5"),
                                                  (3.9, 8, None), (0.4, 1, None)])
def test_on_a_busy_machine_one_thread_per_idle_cpu(load, cpus, expected):
    env = {}
    threads.configure(env, load=load, cpus=cpus)
    assert env.get("OMP_NUM_THREADS") == expected


@pytest.mark.parametrize("user, expected", [({"OMP_NUM_THREADS": "2"}, "2"), ({"ICRL_THREADS": "torch"}, None),
                                            ({"ICRL_THREADS": "3"}, "3"), ({"ICRL_THREADS": " Auto"}, "1"),
                                            ({"OMP_NUM_THREADS": "64"}, "64")])
def test_a_thread_count_the_user_chose_is_kept(user, expected):
    env = dict(user)
    threads.configure(env, load=8.0, cpus=4)
    assert env.get("OMP_NUM_THREADS") == expected


@pytest.mark.parametrize("count", ["3", "64", "007", "9" * 5000])
def test_icrl_threads_is_clamped_to_the_cpus(count):
    env = {"ICRL_THREADS": count}
    threads.configure(env, load=0.0, cpus=2)
    assert env["OMP_NUM_THREADS"] == "2"
    env = {"ICRL_THREADS": count}
    threads.configure(env, load=0.0, cpus=8)
    assert env["OMP_NUM_THREADS"] == {"3": "3", "007": "7"}.get(count, "8")


@pytest.mark.parametrize("user", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "passive"},
                                  {"GOMP_SPINCOUNT": "10000"}])
def test_a_policy_the_user_set_is_kept(user):
    env = dict(user, ICRL_OMP_WAIT_POLICY="passive")
    threads.configure(env, load=0.0, cpus=2)
    assert env == dict(user, ICRL_OMP_WAIT_POLICY="passive")


@pytest.mark.parametrize("choice, expected", [("active", {"OMP_WAIT_POLICY": "ACTIVE"}), ("openmp", {}),
                                              (" Passive ", {"OMP_WAIT_POLICY": "PASSIVE"})])
def test_the_harness_choice_is_overridden_by_its_variable(choice, expected):
    env = {"ICRL_OMP_WAIT_POLICY": choice}
    threads.configure(env, load=0.0, cpus=2)
    assert env == {"ICRL_OMP_WAIT_POLICY": choice, **expected}
    if not expected:
        assert "OpenMP's default" in threads.describe(env)


def test_a_bad_choice_is_one_line_naming_the_values():
    with pytest.raises(UsageError, match=r"ICRL_OMP_WAIT_POLICY='spin': use one of passive, active, openmp"):
        threads.configure({"ICRL_OMP_WAIT_POLICY": "spin"})
    for bad in ("0", "00", "-1", "two", "1.5", "²", "٣", "１"):  # digits int() reads, but not 0-9
        with pytest.raises(UsageError, match=rf"ICRL_THREADS='{bad}': use auto, torch or a number of threads in "
                                             rf"digits 0-9"):
            threads.configure({"ICRL_THREADS": bad})


@pytest.mark.parametrize("bad", ["²", "٣"])
def test_an_entry_point_refuses_a_count_not_in_ascii_digits(bad):
    done = subprocess.run([sys.executable, str(REPO / "run_experiment.py"), "--help"], cwd=REPO,
                          env=clean_env(ICRL_THREADS=bad), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.splitlines() == [f"error: ICRL_THREADS='{bad}': use auto, torch or a number of threads in "
                                        f"digits 0-9 (or set OMP_NUM_THREADS yourself)"]


def test_auto_counts_the_cpus_busy_now(monkeypatch):
    monkeypatch.setattr(threads, "busy_cpus", lambda: 1.6)
    env = {}
    threads.configure(env, cpus=2)
    assert env["OMP_NUM_THREADS"] == "1"
    monkeypatch.setattr(threads, "busy_cpus", lambda: 0.2)
    env = {}
    threads.configure(env, cpus=2)
    assert "OMP_NUM_THREADS" not in env


def test_busy_cpus_sees_a_process_that_computes_now():
    spin = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 20\nwhile time.time() < end: pass"])
    try:
        time.sleep(0.5)
        assert threads.busy_cpus(interval=0.5) >= 0.8  # other work on a shared machine only adds to it
    finally:
        spin.kill()
        spin.wait()


def test_the_test_suite_runs_with_a_policy():
    assert os.environ.get("OMP_WAIT_POLICY") or os.environ.get("GOMP_SPINCOUNT")  # tests/conftest.py


@pytest.mark.parametrize("script", ENTRY_POINTS)
def test_each_entry_point_sets_the_threads_before_torch_loads(script):
    done = probe(script, clean_env(ICRL_THREADS="3"))
    assert done.returncode == 0, done.stderr
    count = min(3, threads.usable_cpus())  # clamped to the CPUs
    assert done.stdout.strip().endswith(f"OMP_WAIT_POLICY PASSIVE OMP_NUM_THREADS {count}"), done.stdout + done.stderr


def test_an_entry_point_keeps_the_users_choice():
    done = probe("run_experiment.py", clean_env(OMP_WAIT_POLICY="ACTIVE", OMP_NUM_THREADS="2"))
    assert done.stdout.strip().endswith("OMP_WAIT_POLICY ACTIVE OMP_NUM_THREADS 2"), done.stdout + done.stderr


def test_an_entry_point_refuses_a_bad_choice_in_one_line():
    done = subprocess.run([sys.executable, str(REPO / "run_sweep.py"), "--help"], cwd=REPO,
                          env=clean_env(ICRL_OMP_WAIT_POLICY="fast"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: ICRL_OMP_WAIT_POLICY='fast': use one of passive, active, openmp (or set OMP_WAIT_POLICY yourself)"]
    assert done.stdout == ""
