"""run_sweep.py --ray without a cluster (icrl/sweep/ray_launcher.py, icrl/sweep/worker.py): every
run in exactly one batch, the workers' shape checked against the cluster, the worker's batches
write the records of the sweep without Ray, and a missing Ray is one line, exit 2. The tests on
a real local Ray instance are in tests/integration/test_ray_launcher_cluster.py."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from icrl.backends import load_backend
from icrl.errors import UsageError
from icrl.sweep import ray_launcher, runner
from icrl.sweep.worker import SweepWorker

TINY = ["--model_name", "smollm2-135m", "--backend", "fake", "--task_name", "trec_coarse", "--train_k", "4",
        "--test_k", "2", "--test_every", "2", "--max_context_examples", "3", "--icrl", "--test_seed", "5"]
GRID = ["--grid", "context_strategy_name=random_biased_end,random_unbiased_only_positive",
        "--grid", "seed+training_seed=100,101,102"]


def test_batches_hold_every_run_once_and_never_mix_models():
    groups = [list(range(7)), ["a", "b"], ["z"]]
    for workers in (1, 2, 3, 8):
        out = ray_launcher.batches(groups, workers)
        flat = [x for batch in out for x in batch]
        assert sorted(map(str, flat)) == sorted(map(str, [x for g in groups for x in g]))
        assert all(len({type(x) for x in batch}) == 1 for batch in out)
        assert len(out) == sum(min(workers, len(g)) for g in groups)


def _opts(**values):
    base = dict(ray_workers=None, ray_gpus_per_worker=None, ray_cpus_per_worker=1.0)
    return SimpleNamespace(**{**base, **values})


def _runs(tp=None):
    return [SimpleNamespace(args=SimpleNamespace(spec=SimpleNamespace(tensor_parallel_size=tp)))]


def test_worker_shape_follows_the_cluster_and_refuses_what_it_lacks():
    assert ray_launcher.worker_shape({"CPU": 16, "GPU": 8}, _runs(), _opts()) == (8, 1.0, 1.0)
    assert ray_launcher.worker_shape({"CPU": 16, "GPU": 8}, _runs(tp=2), _opts()) == (4, 2.0, 1.0)
    assert ray_launcher.worker_shape({"CPU": 2}, _runs(), _opts()) == (1, 0.0, 1.0)
    assert ray_launcher.worker_shape({"CPU": 2}, _runs(), _opts(ray_workers=2)) == (2, 0.0, 1.0)
    with pytest.raises(UsageError, match="8 GPUs, but the Ray cluster has 4"):
        ray_launcher.worker_shape({"CPU": 16, "GPU": 4}, _runs(), _opts(ray_workers=8))
    with pytest.raises(UsageError, match="needs 8 GPUs but the Ray cluster has 4"):
        ray_launcher.worker_shape({"CPU": 16, "GPU": 4}, _runs(tp=8), _opts())
    with pytest.raises(UsageError, match="3 CPUs, but the Ray cluster has 2"):
        ray_launcher.worker_shape({"CPU": 2}, _runs(), _opts(ray_workers=3))


def test_the_workers_line_counts_in_words():
    assert ray_launcher.shape_line((1, 0.0, 1.0), 4, 1) == "Ray: 1 worker (0 GPUs, 1 CPU each) for 4 runs in 1 batch"
    assert ray_launcher.shape_line((2, 1.0, 2.0), 1, 2) == "Ray: 2 workers (1 GPU, 2 CPUs each) for 1 run in 2 batches"
    with pytest.raises(UsageError, match="^1 worker x 3 CPUs = 3 CPUs, but the Ray cluster has 2"):
        ray_launcher.worker_shape({"CPU": 2}, _runs(), _opts(ray_workers=1, ray_cpus_per_worker=3.0))


@pytest.mark.parametrize("address, message", [
    ("head", "write HOST:PORT"),
    ("head:port", "write HOST:PORT"),
])
def test_bad_addresses_are_one_line_errors(address, message):
    with pytest.raises(UsageError, match=message):
        ray_launcher.check_reachable(address)


def test_missing_ray_is_one_line_exit_2_before_anything_runs(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    code = runner.main([*GRID, *TINY, "--ray", "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == f"error: --ray needs Ray, which is not installed here: {ray_launcher.INSTALL_HINT}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, message", [
    (["--ray", "--shard", "1/2"], "give --ray or --shard, not both"),
    (["--ray_workers", "0"], "--ray_workers must be >= 1"),
])
def test_bad_ray_flags_are_one_line_errors(flags, message, capsys):
    assert runner.main([*GRID, *TINY, *flags]) == 2
    assert message in capsys.readouterr().err


def test_rays_own_lines_are_held_until_the_workers_load_and_never_precede_a_refusal():
    import logging

    seen = []

    class Screen(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logger, screen = logging.getLogger("ray"), Screen()
    logger.addHandler(screen)
    try:
        with pytest.raises(UsageError):
            with ray_launcher.held_ray_lines():
                logger.warning("Token authentication is enabled for this Ray cluster")
                raise UsageError("each worker needs 1 GPUs but the Ray cluster has 0")
        assert seen == [] and screen in logger.handlers
        with ray_launcher.held_ray_lines():
            logger.warning("a word of Ray's")
            assert seen == []
        assert seen == ["a word of Ray's"]
    finally:
        logger.removeHandler(screen)


def records(run_dir) -> dict:
    out = {}
    for name in ("train.jsonl", "test.jsonl"):
        rows = [json.loads(line) for line in (run_dir / name).read_text().splitlines()]
        out[name] = [{k: v for k, v in row.items() if k != "time_s"} for row in rows]
    return out


def test_a_worker_writes_the_records_of_the_sweep_without_ray_and_resumes_a_batch(data_dir, tmp_path, monkeypatch):
    """Two workers share the sweep's batches; a batch taken over half-done (a worker that died)
    resumes to the step: the records are those of the sweep in one process."""
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    _, local = runner.plan([*GRID, *TINY, "--output_dir", str(tmp_path / "local")])
    assert [o.status for o in runner.execute(local, backend=load_backend("x", backend="fake"), progress=False)] \
        == ["finished"] * 6
    _, runs = runner.plan([*GRID, *TINY, "--output_dir", str(tmp_path / "ray")])
    work = ray_launcher.batches(runner.groups_of(runs), 2)
    first, second = SweepWorker(), SweepWorker()
    first.load(work[0][0].words)
    # The first worker "dies" after two steps of its batch: its runs hold two steps each.
    for run in work[0]:
        half = run.words + ["--train_k", "2"]
        assert first.run([(run.index, half)])[0]["status"] == "finished"
    steps, lines = first.poll()
    assert set(steps) == {r.index for r in work[0]} and lines
    outcomes = second.run([(r.index, r.words) for r in work[0]]) + second.run([(r.index, r.words) for r in work[1]])
    assert [o["status"] for o in outcomes] == ["finished"] * 6
    for run, alone in zip(runs, local):
        assert records(run.out_dir) == records(alone.out_dir), run.label()


class _Died(Exception):
    """What ray.get raises for a task whose actor died (RayActorError)."""


class _FakeRay:
    """Just what Driver uses of Ray: actors whose ``run`` calls ``act(run indices)`` when got."""

    exceptions = SimpleNamespace(RayActorError=_Died)

    def __init__(self, act):
        self.act, self.started = act, 0

    def remote(self, cls):
        ray = self

        class Remote:
            def options(self, **_):
                return self

            def remote(self, cwd):
                ray.started += 1
                def run(batch, width):
                    return lambda: ray.act([i for i, _ in batch])

                return SimpleNamespace(run=SimpleNamespace(remote=run),
                                       poll=SimpleNamespace(remote=lambda: lambda: ({}, [])))

        return Remote()

    def wait(self, refs, num_returns, timeout):
        return refs[:1], refs[1:]

    def get(self, ref, timeout=None):
        return ref()


def _driver(ray, tmp_path, runs: int):
    said = []
    driver = ray_launcher.Driver(ray, (1, 0.0, 1.0), str(tmp_path), say=said.append)
    driver.actors = [driver._start()]
    work = [[SimpleNamespace(index=i, words=[], out_dir=tmp_path / f"run{i}") for i in range(runs)]]
    for run in work[0]:
        run.out_dir.mkdir()
    return driver, work, said


def test_a_batch_whose_workers_keep_dying_after_progress_finishes_however_many_deaths(tmp_path):
    """A worker killed every few seconds, each after writing a line: the sweep ends, every run
    finished, after many more deaths than workers."""
    def act(indices):
        train = tmp_path / f"run{indices[0]}" / "train.jsonl"
        with open(train, "a") as f:
            f.write("{}\n")
        if len(train.read_text().splitlines()) < 12:
            raise _Died("The actor died unexpectedly before finishing this task.")
        return [{"status": "finished"} for _ in indices]

    driver, work, said = _driver(_FakeRay(act), tmp_path, runs=2)
    outcomes = driver.run(work, on_poll=lambda polls: None)
    assert [outcomes[i].status for i in (0, 1)] == ["finished", "finished"]
    assert driver.deaths == 11 and len(said) == 11 and "its runs #0, #1 resume on another worker" in said[-1]


def test_a_batch_whose_workers_die_without_writing_a_line_fails_after_a_bounded_count(tmp_path):
    def act(indices):
        raise _Died("The actor died unexpectedly before finishing this task.")

    ray = _FakeRay(act)
    driver, work, said = _driver(ray, tmp_path, runs=2)
    outcomes = driver.run(work, on_poll=lambda polls: None)
    assert driver.deaths == ray_launcher.BARREN_DEATHS and len(said) == ray_launcher.BARREN_DEATHS - 1
    for i in (0, 1):
        assert outcomes[i].status == "failed"
        assert outcomes[i].error.startswith(f"its Ray workers died {ray_launcher.BARREN_DEATHS} times in a row "
                                            f"without writing a line; last: The actor died")
