"""A study under chaos: sweeps whose processes are killed and whose server fails, each ending
with the records of the same sweep run quietly.

A. Ray (``--ray_runs``, 200 by default): ``run_sweep.py --ray`` on the fake backend across
   ``--workers`` Ray workers (each fake model call made ``--delay_s`` slower, so that there is
   time to kill), first quietly, then again into a fresh folder while a Ray worker process of
   the sweep, drawn at random, is SIGKILLed every ``--kill_every_s`` seconds (each wait drawn
   between half and one and a half times that, seeded; a worker is a victim once it has written
   a line since it took a run, as a killer faster than a worker starts would only starve the
   sweep), and the driver (run_sweep.py itself) is SIGKILLed once, when ``--driver_kill_at`` of
   the training steps are written, and started again at once with the same command. Its Ray
   processes (workers, agents), orphaned, are watched until they end.
B. Server (``--server_runs``): ``run_sweep.py --backend openai`` against a local stand-in
   (icrl/standin/openai_server.py), first answering every request, then answering a share
   ``--error_rate`` of them with a 429 or a 500 at random (seeded, in the order requests
   arrive); the harness retries them (``--max_retries``, the client's own backoff).

Checks, for each part: the chaotic sweep exits 0 (after its restart) with no traceback; it has
the quiet sweep's run folders, each once; every run's training steps are written once each, in
order, and its test steps once each; every run's records (train.jsonl, test.jsonl, results.json
less their timings, config.json's args) equal the quiet run's. Prints the kills survived, the
errors injected and the time each cost against the quiet sweep, with the machine's load before
and after; ``--out FILE.json`` writes it all. Exit 1 when a check fails.

    python bench/chaos.py [--ray_runs 200] [--workers 4] [--kill_every_s 5] [--server_runs 40]
                          [--error_rate 0.2] [--seed 0] [--out chaos.json] [--keep DIR]

Bounded: each sweep has a deadline (``--sweep_timeout_s``), the kills a maximum count
(``--max_kills``), every wait a deadline; on any exit (the end, a failed check, Ctrl-C, SIGTERM)
every process of the sweeps' sessions is killed, Ray's included (they share the driver's session).
Data: --data_dir, else $ICRL_DATA_DIR, else ../shared/datasets next to the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

from busy import load_text  # noqa: E402
from icrl.standin.openai_server import MODEL, FakeOpenAIServer  # noqa: E402
from helpers import run_records  # noqa: E402
from prefix_reuse import data_dir  # noqa: E402

WORKER_TITLE = "ray::SweepWorker"
POLL_S = 0.2


class Failed(Exception):
    """A sweep that did not end as it should (the message says how)."""


def _stop(*_):
    raise KeyboardInterrupt


# -- processes ------------------------------------------------------------------------------------
def session_processes(sid: int) -> dict:
    """{pid: command line} of the live processes in session ``sid`` (a driver's and Ray's)."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) != sid or fields[0] == "Z":
                continue
            command = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ")
            out[int(entry.name)] = command.decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    return out


def kill_session(sid: int, wait_s: float = 10.0) -> int:
    """SIGKILL every process of session ``sid``; how many there were."""
    found = session_processes(sid)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + wait_s
    while session_processes(sid) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return len(found)


class Sessions:
    """The sweeps this script started; each killed with all its session on ``close``."""

    def __init__(self, env: dict, logs: Path):
        self.env, self.logs, self.sids, self.count = env, logs, [], 0

    def start(self, argv: list, name: str, env: dict = None) -> subprocess.Popen:
        self.count += 1
        out = open(self.logs / f"{self.count:02d}-{name}.out", "w")
        err = open(self.logs / f"{self.count:02d}-{name}.err", "w")
        proc = subprocess.Popen([sys.executable, str(REPO / "run_sweep.py"), *argv], cwd=REPO, env=env or self.env,
                                stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        proc.logs = (Path(out.name), Path(err.name))
        out.close(), err.close()
        self.sids.append(proc.pid)
        return proc

    def close(self) -> None:
        for sid in self.sids:
            kill_session(sid)


def wait_for(proc, deadline: float) -> int:
    try:
        return proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise Failed(f"run_sweep.py (pid {proc.pid}) still running at its deadline") from None


def ended_well(proc, code: int) -> str:
    """The sweep's stderr; Failed if it exited non-zero or printed a traceback."""
    out, err = (p.read_text(errors="replace") for p in proc.logs)
    if code != 0 or "Traceback" in err or "Traceback" in out:
        raise Failed(f"run_sweep.py exited {code}: {(err or out).strip()[-2000:]}")
    return err


# -- the sweeps -----------------------------------------------------------------------------------
def sweep_argv(args, runs: int, root: Path) -> list:
    seeds = ",".join(str(100 + i) for i in range(runs))
    return ["--grid", f"seed+training_seed={seeds}", "--task_name", args.task,
            "--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.5",
            "--temperature", "1.0", "--icrl", "--test_seed", "5", "--max_context_examples", "3",
            "--train_k", str(args.train_k), "--test_every", str(args.test_every), "--test_k", str(args.test_k),
            "--data_dir", str(args.data_dir), "--output_dir", str(root), "--name", "chaos", "--no-progress"]


def ray_argv(args, root: Path, ray: bool = True) -> list:
    """Part A's sweep; ``ray`` False: the same runs in one process, all in lock-step
    (--quiet_without_ray: neither changes a record)."""
    words = [*sweep_argv(args, args.ray_runs, root), "--backend", "fake", "--model_name", "fake"]
    if not ray:
        return words
    words += ["--ray", "--ray_workers", str(args.workers), "--ray_cpus_per_worker", "0.5"]
    return words + (["--max_parallel", str(args.max_parallel)] if args.max_parallel else [])


def server_argv(args, root: Path, url: str) -> list:
    return [*sweep_argv(args, args.server_runs, root), "--backend", "openai", "--model_name", MODEL,
            "--base_url", url, "--max_retries", str(args.max_retries), "--timeout", "60"]


def quiet(sessions: Sessions, argv: list, name: str, timeout_s: float, env: dict = None) -> float:
    start = time.monotonic()
    proc = sessions.start(argv, name, env)
    ended_well(proc, wait_for(proc, start + timeout_s))
    return time.monotonic() - start


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def scan(root: Path) -> tuple[int, dict]:
    """(training lines written under ``root``, {run folder: (pid its lock names, its lines)}):
    each run folder's lock file names its last writer (icrl/infra/lock.py)."""
    steps, runs = 0, {}
    for lock in root.rglob(".lock"):
        train, test = _lines(lock.parent / "train.jsonl"), _lines(lock.parent / "test.jsonl")
        steps += train
        try:
            pid = json.loads(lock.read_text() or "{}").get("pid")
        except (OSError, ValueError):
            continue
        runs[lock.parent] = (pid, train + test)
    return steps, runs


class Chaos:
    """Kills a random Ray worker of the running driver every few seconds, and the driver once.
    A worker is a victim once it has written a line of a run since it took that run's lock: a
    killer faster than a worker starts would only starve the sweep (which gives a batch up after
    three deaths in a row without a line written: icrl/sweep/ray_launcher.py)."""

    def __init__(self, args, root: Path):
        self.args, self.root, self.rng = args, root, random.Random(args.seed)
        self.kills, self.driver_killed_at, self.taken, self.orphans = 0, None, {}, None
        self.driver_at = args.driver_kill_at * args.ray_runs * args.train_k

    def wait(self) -> float:
        return self.args.kill_every_s * self.rng.uniform(0.5, 1.5)

    def victims(self, sid: int, runs: dict) -> list:
        """The sweep's workers that wrote a line since they took a run's lock."""
        wrote = set()
        for run, (pid, lines) in runs.items():
            holder, at = self.taken.get(run, (None, 0))
            if holder != pid:
                self.taken[run] = (pid, lines)
            elif lines > at:
                wrote.add(pid)
        workers = [pid for pid, cmd in session_processes(sid).items() if cmd.startswith(WORKER_TITLE)]
        return sorted(pid for pid in workers if pid in wrote)

    def life(self, proc, deadline: float) -> bool:
        """Until the driver ends (False) or is killed (True)."""
        next_kill = time.monotonic() + self.wait()
        while proc.poll() is None:
            now = time.monotonic()
            if now > deadline:
                raise Failed(f"the chaotic sweep still ran at its deadline ({self.args.sweep_timeout_s:g} s)")
            steps, runs = scan(self.root)
            if self.orphans is not None:
                self.orphans.poll()
            if self.driver_killed_at is None and steps >= self.driver_at:
                self.driver_killed_at = steps
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                return True
            victims = self.victims(proc.pid, runs)
            if now >= next_kill and victims and self.kills < self.args.max_kills:
                try:
                    os.kill(self.rng.choice(victims), signal.SIGKILL)
                    self.kills += 1
                except OSError:  # it ended on its own in between
                    pass
                next_kill = now + self.wait()
            time.sleep(POLL_S)
        return False


class Orphans:
    """The processes of the killed driver's session (Ray's: its workers, its agents), watched
    while the restarted sweep runs: seconds until its last worker and its last process ended."""

    def __init__(self, sid: int):
        self.sid, self.start, self.workers_s, self.all_s = sid, time.monotonic(), None, None

    def poll(self) -> None:
        if self.all_s is not None:
            return
        left, now = session_processes(self.sid), time.monotonic() - self.start
        if self.workers_s is None and not any(cmd.startswith(WORKER_TITLE) for cmd in left.values()):
            self.workers_s = now
        if not left:
            self.all_s = now

    def report(self) -> dict:
        """The figures; what is still alive is killed (and counted)."""
        self.poll()
        left = session_processes(self.sid)
        kill_session(self.sid)
        return {"orphan_workers_ended_s": self.workers_s, "orphans_ended_s": self.all_s,
                "orphans_left_at_end": sorted(cmd.split()[0] for cmd in left.values())}


def chaotic_ray(sessions: Sessions, args, root: Path) -> dict:
    chaos, start = Chaos(args, root), time.monotonic()
    deadline, said = start + args.sweep_timeout_s, []
    for life in range(2):  # the driver is killed once: two lives at most
        proc = sessions.start(ray_argv(args, root), f"ray-chaos-{life + 1}")
        if not chaos.life(proc, deadline):
            said.append(ended_well(proc, proc.wait()))
            break
        chaos.orphans = Orphans(proc.pid)  # started again at once, as a user would
        said.append(proc.logs[1].read_text(errors="replace"))
    else:
        raise Failed("the restarted driver was killed again")
    deaths = sum(text.count("a Ray worker died") for text in said)
    orphans = chaos.orphans.report() if chaos.orphans else {}
    return {"seconds": time.monotonic() - start, "worker_kills": chaos.kills, "deaths_seen_by_driver": deaths,
            "driver_killed_at_steps": chaos.driver_killed_at, **orphans}


def chaotic_server(sessions: Sessions, args, root: Path) -> dict:
    with FakeOpenAIServer("flaky", error_rate=args.error_rate, seed=args.seed) as server:
        start = time.monotonic()
        proc = sessions.start(server_argv(args, root, server.base_url), "server-chaos")
        ended_well(proc, wait_for(proc, start + args.sweep_timeout_s))
        seconds = time.monotonic() - start
        injected, requests = server.injected, len(server.requests)
    return {"seconds": seconds, "requests": requests, "errors_injected": sum(injected.values()),
            "by_status": {str(k): v for k, v in sorted(injected.items())}}


# -- the checks -----------------------------------------------------------------------------------
def run_dirs(root: Path) -> dict:
    return {str(p.parent.relative_to(root)): p.parent for p in sorted(root.rglob("config.json"))}


def lines_once(run_dir: Path, train_k: int) -> list:
    """What is wrong with a run's lines: a training step missing, twice or out of order, a test
    step twice (an empty list: each once)."""
    problems = []
    for name in ("train", "test"):
        steps = [json.loads(line)["step"] for line in (run_dir / f"{name}.jsonl").read_text().splitlines()]
        if name == "train" and steps != list(range(train_k)):
            problems.append(f"{run_dir}: training steps {steps}, not 0 to {train_k - 1} once each")
        if name == "test" and len(set(steps)) != len(steps):
            problems.append(f"{run_dir}: test steps {steps} (one twice)")
    return problems


def compare(quiet_root: Path, chaos_root: Path, runs: int, train_k: int) -> dict:
    """Folders, lines and records of the chaotic sweep against the quiet one's."""
    ours, theirs = run_dirs(chaos_root), run_dirs(quiet_root)
    problems = [] if len(theirs) == runs else [f"the quiet sweep wrote {len(theirs)} run folders, not {runs}"]
    if set(ours) != set(theirs):
        problems.append(f"run folders: {len(set(theirs) - set(ours))} missing, {len(set(ours) - set(theirs))} extra")
    lines = 0
    for rel in sorted(set(ours) & set(theirs)):
        try:
            problems += lines_once(ours[rel], train_k)
            mine, quiet_one = run_records(ours[rel], args=True), run_records(theirs[rel], args=True)
        except (OSError, ValueError, KeyError) as exc:
            problems.append(f"{rel}: {type(exc).__name__}: {exc}")
            continue
        lines += len(mine["train.jsonl"]) + len(mine["test.jsonl"])
        if mine != quiet_one:
            which = [k for k in mine if mine[k] != quiet_one.get(k)]
            problems.append(f"{rel}: {', '.join(which)} differ from the quiet run's")
    return {"run_folders": len(ours), "lines": lines, "identical": not problems, "problems": problems[:20]}


# -- the report -----------------------------------------------------------------------------------
def orphans_text(chaos: dict) -> str:
    def seconds(value):
        return "still alive at the end" if value is None else f"{value:.0f} s"

    left = f", killed at the end: {', '.join(chaos['orphans_left_at_end'])}" if chaos.get("orphans_left_at_end") else ""
    return (f"its Ray workers ended {seconds(chaos.get('orphan_workers_ended_s'))} after it, its last process "
            f"{seconds(chaos.get('orphans_ended_s'))}{left}")


def cost(quiet_s: float, chaos_s: float) -> str:
    return f"quiet {quiet_s:.1f} s, under chaos {chaos_s:.1f} s (+{chaos_s - quiet_s:.1f} s, {chaos_s / quiet_s:.2f}x)"


def part_ray(sessions: Sessions, args, work: Path) -> dict:
    quiet_argv = ray_argv(args, work / "ray-quiet", ray=not args.quiet_without_ray)
    plain_env = {k: v for k, v in sessions.env.items() if k != "ICRL_FAKE_DELAY_S"}  # no model latency
    quiet_s = quiet(sessions, quiet_argv, "ray-quiet", args.sweep_timeout_s,
                    plain_env if args.quiet_without_ray else None)
    chaos = chaotic_ray(sessions, args, work / "ray-chaos")
    check = compare(work / "ray-quiet", work / "ray-chaos", args.ray_runs, args.train_k)
    plain = " (quiet: without Ray)" if args.quiet_without_ray else ""
    print(f"A. Ray, {args.ray_runs} runs on {args.workers} workers: {cost(quiet_s, chaos['seconds'])}{plain}; "
          f"{chaos['worker_kills']} worker kills survived ({chaos['deaths_seen_by_driver']} deaths seen by the "
          f"driver), "
          f"the driver killed once at {chaos['driver_killed_at_steps']} training steps and restarted at once "
          f"({orphans_text(chaos)}); "
          f"{check['run_folders']} run folders and {check['lines']} lines, each once; records identical: "
          f"{'yes' if check['identical'] else 'NO'}", flush=True)
    say_problems(check)
    return {"quiet_seconds": quiet_s, "quiet_with_ray": not args.quiet_without_ray, **chaos, **check}


def say_problems(check: dict) -> None:
    for problem in check["problems"]:
        print(f"   {problem}", flush=True)


def part_server(sessions: Sessions, args, work: Path) -> dict:
    with FakeOpenAIServer("ok") as server:
        quiet_s = quiet(sessions, server_argv(args, work / "server-quiet", server.base_url), "server-quiet",
                        args.sweep_timeout_s)
    chaos = chaotic_server(sessions, args, work / "server-chaos")
    check = compare(work / "server-quiet", work / "server-chaos", args.server_runs, args.train_k)
    statuses = ", ".join(f"{n} x {status}" for status, n in chaos["by_status"].items())
    print(f"B. Server, {args.server_runs} runs, {args.error_rate:.0%} of requests failed: "
          f"{cost(quiet_s, chaos['seconds'])}; {chaos['errors_injected']} errors injected ({statuses}) in "
          f"{chaos['requests']} requests; {check['run_folders']} run folders and {check['lines']} lines, each once; "
          f"records identical: {'yes' if check['identical'] else 'NO'}", flush=True)
    say_problems(check)
    return {"quiet_seconds": quiet_s, **chaos, **check}


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ray_runs", type=int, default=200, help="runs of part A (0: skip it)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kill_every_s", type=float, default=5.0, help="mean seconds between worker kills")
    parser.add_argument("--max_kills", type=int, default=500)
    parser.add_argument("--driver_kill_at", type=float, default=0.4, help="share of training steps written")
    parser.add_argument("--delay_s", type=float, default=0.1,
                        help="seconds each run's fake model call takes (part A)")
    parser.add_argument("--max_parallel", type=int, default=10, help="runs in lock-step on a worker (0: all)")
    parser.add_argument("--quiet_without_ray", action="store_true",
                        help="part A's quiet sweep in one process, without Ray, all runs in lock-step and no "
                             "--delay_s (quicker; the same records)")
    parser.add_argument("--server_runs", type=int, default=40, help="runs of part B (0: skip it)")
    parser.add_argument("--error_rate", type=float, default=0.2)
    parser.add_argument("--max_retries", type=int, default=10)
    parser.add_argument("--train_k", type=int, default=8)
    parser.add_argument("--test_every", type=int, default=4)
    parser.add_argument("--test_k", type=int, default=4)
    parser.add_argument("--task", default="trec_coarse")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sweep_timeout_s", type=float, default=1800.0, help="deadline of each sweep")
    parser.add_argument("--keep", default=None, help="write the sweeps here and keep them (default: a temporary one)")
    parser.add_argument("--out", default=None, help="the figures as JSON")
    args = parser.parse_args(argv)
    args.data_dir = data_dir(args.data_dir)
    if args.driver_kill_at <= 0 or args.driver_kill_at >= 1 or args.kill_every_s <= 0:
        parser.error("--driver_kill_at must be in (0, 1) and --kill_every_s > 0")
    return args


def study(args, work: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
           "ICRL_DATA_DIR": str(args.data_dir), "ICRL_FAKE_DELAY_S": str(args.delay_s)}
    (work / "logs").mkdir(parents=True, exist_ok=True)
    sessions = Sessions(env, work / "logs")
    report = {"load_before": load_text()}
    print(f"start: {report['load_before']}", flush=True)
    try:
        if args.ray_runs:
            report["ray"] = part_ray(sessions, args, work)
        if args.server_runs:
            sessions.env = {k: v for k, v in env.items() if k != "ICRL_FAKE_DELAY_S"}
            report["server"] = part_server(sessions, args, work)
    except Failed as exc:
        report["failed"] = str(exc)
        print(f"FAILED: {exc} (logs: {work / 'logs'})", flush=True)
    finally:
        sessions.close()
    report["load_after"] = load_text()
    report["passed"] = "failed" not in report and all(report[p]["identical"] for p in ("ray", "server") if p in report)
    print(f"end: {report['load_after']}; {'passed' if report['passed'] else 'FAILED'}", flush=True)
    return report


def main(argv=None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, _stop)
    try:
        if args.keep:
            report = study(args, Path(args.keep))
        else:
            with tempfile.TemporaryDirectory(prefix="icrl-chaos-") as tmp:
                report = study(args, Path(tmp))
    except KeyboardInterrupt:
        print("interrupted: every process it started is stopped", file=sys.stderr, flush=True)
        return 130
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
