"""Experiment records on disk: one directory per experiment, appended as the run goes.

Layout (the published one, so existing habits carry over)::

    <output_dir>/<model>/<task>/<max_context_examples>/<icrl>/<strategy>[_<method>_<K>][_exemplars<n>]/
        <p_keep>/<omit_feedback>/<flip>[_<prob>]/<temperature>/<training_seed>/
        seed<seed>_testseed<test_seed>_testk<k|all>_every<test_every>[_maxlen<n>][_<backend>]...

The last folder is ours: it holds every argument that changes what a run computes and that
the published path lacks (see ``run_folder``), so runs differing only in a seed, the test
set or the model window sit side by side. ``--train_k`` is not in it: a run with a larger
``--train_k`` extends the finished one (training examples are a prefix of one seeded
permutation). An omitted ``--max_context_examples`` (sized from the window) is ``auto`` in
the path, its resolved number is in config.json; zero-shot's strategy folder is ``none``.

Files in it:

- ``config.json``   every argument (never the HF token), resolved settings, package versions,
                    git commit, device, dataset fingerprint, the test set and exemplars.
- ``train.jsonl``   one JSON line per training step (written last for its step).
- ``test.jsonl``    one JSON line per test step.
- ``results.json``  summary, rewritten atomically after each test step (``finished`` flag).
- ``log.txt``       the run's log.

A step is complete once its train line is on disk (its test line, if any, is written just
before). Each append is flushed and fsynced, so a killed run loses at most the step in
flight; a truncated last line is detected and dropped on resume.

``inspect_run`` checks a run's records against its ``config.json`` (step numbers, training
example ids, planned test steps, test-set size); the experiment trusts a finished run only
when it passes, and the readers (``Results``, plots, token counts) use the same check.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from .errors import UsageError
from .safepaths import folder_name, inside, model_folder

FORMAT_VERSION = 1
CONFIG, TRAIN, TEST, RESULTS, LOG = "config.json", "train.jsonl", "test.jsonl", "results.json", "log.txt"
MAX_CONTEXT_FILE = "maximum_context_length.json"


def experiment_dir(output_dir, args: dict) -> Path:
    """The published directory layout for one experiment's arguments, plus ``run_folder``."""
    strategy = args["context_strategy_name"] or "none"
    if args["max_context_examples"] == 0:
        strategy = "none"  # zero-shot has no context to pick
    if strategy.startswith("approximate"):
        strategy = f"{strategy}_{args['approximate_context_sampling_method']}_{args['max_contexts']}"
    if args.get("exemplars_per_label"):
        strategy += f"_exemplars{args['exemplars_per_label']}"
    flip = str(args["icrl_flip_feedback"])
    if args["icrl_flip_feedback"]:
        flip += f"_{args['icrl_flip_feedback_prob']}"
    size = args["max_context_examples"]
    parts = [model_folder(args["model_name"]), folder_name(args["task_name"]), "auto" if size is None else str(size), str(args["icrl"]),
             strategy, str(args["context_p_keep"]), str(args["icrl_omit_feedback"]), flip,
             str(args["temperature"]), str(args["training_seed"]), run_folder(args)]
    return inside(output_dir, *parts)


# Identity arguments outside the published path that are named in run_folder only when they
# differ from their default (argument, default, short name).
OPTIONAL_FOLDER_ARGS = (
    ("max_model_len", None, "maxlen"), ("backend", "auto", ""), ("device", None, ""), ("dtype", "auto", ""),
    ("rope_scaling", None, "rope"), ("eot_token", None, "eot"), ("published_tokenization", False, "pubtok"),
    ("api_model", None, "apimodel"), ("api_mode", "auto", "api"),
)


def run_folder(args: dict) -> str:
    """The last folder of a run's path: what the published path lacks and changes results.

    ``seed<seed>_testseed<test_seed>_testk<k|all>_every<test_every>``, then, only when set
    to something other than their default, ``_maxlen<n>``, ``_<backend>``, ``_<device>``,
    ``_<dtype>``, ``_rope<spec>``, ``_eot<token>``, ``_pubtok``, ``_apimodel<name>``,
    ``_api<mode>`` (characters other than letters, digits, ``.`` and ``-`` become ``-``).
    ``train_k`` is left out on purpose (a longer run extends a shorter one), and so are the
    runtime arguments (``cli.RUNTIME_ARGS``), which do not change what a run computes.
    """
    test_k = args.get("test_k", -1)
    name = (f"seed{args.get('seed')}_testseed{args.get('test_seed')}_"
            f"testk{'all' if test_k in (-1, None) else test_k}_every{args.get('test_every')}")
    for key, default, short in OPTIONAL_FOLDER_ARGS:
        value = args.get(key, default)
        if value == default:
            continue
        name += "_" + short + ("" if value is True else _safe(str(value)))
    return name


def _safe(text: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in ".-") else "-" for c in text)


def max_context_path(output_dir, model_name: str, task_name: str) -> Path:
    return inside(output_dir, model_folder(model_name), folder_name(task_name), MAX_CONTEXT_FILE)


def _temporary(path: Path) -> tuple[int, str]:
    """A new file next to ``path`` (``.<name>.<random>``), with the umask's mode like any other."""
    while True:
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def write_json_atomic(path: Path, data) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one.

    A kill between the two leaves a ``.<name>.<random>`` file; ``remove_leftovers`` clears it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temporary(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_json(path: Path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def remove_leftovers(directory: Path, names: Iterable[str], older_than_s: float = 0.0) -> list[Path]:
    """Delete the temporary files a kill during an atomic write left next to ``names``.

    Call it only where no other process may be writing (under the run's lock), or with
    ``older_than_s`` large enough that a live writer's file is not touched.
    """
    removed = []
    directory = Path(directory)
    if not directory.is_dir():
        return removed
    now = time.time()
    for name in names:
        for path in list(directory.glob(f".{name}.*")) + [directory / f"{name}.tmp"]:
            try:
                if path.is_file() and now - path.stat().st_mtime >= older_than_s:
                    path.unlink()
                    removed.append(path)
            except OSError:
                pass
    return removed


class DamagedRecords(UsageError):
    """A run's records contradict each other or its config.json (one-line message)."""


def parse_jsonl(path: Path) -> tuple[list[tuple[int, object]], list[int], bool]:
    """(records as (line number, value), numbers of lines that do not parse, cut_tail).

    Every line is parsed on its own, so a bad line never hides the good ones after it.
    ``cut_tail``: the last line has no newline (a write cut short by a kill); it is not
    returned among the records nor the bad lines.
    """
    if not path.exists():
        return [], [], False
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    cut_tail = bool(lines) and not lines[-1].endswith(b"\n")
    if cut_tail:
        lines = lines[:-1]
    records, bad = [], []
    for number, line in enumerate(lines, start=1):
        try:
            records.append((number, json.loads(line)))
        except ValueError:
            bad.append(number)
    return records, bad, cut_tail


def read_jsonl(path: Path, repair: bool = False) -> list[dict]:
    """Every complete line of a JSON-lines file.

    Reading stops at the first line without its newline or that does not parse (a write cut
    short by a kill is the last line); with ``repair`` the file is cut there so appends
    continue cleanly. Lines after it, if any, belong to steps that are then recomputed.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    records, good_end = [], 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            records.append(json.loads(line))
        except ValueError:
            break
        good_end += len(line)
    if repair and good_end < len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return records


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_train(records: list[tuple[int, object]], bad: list[int], train_ids: Optional[list],
                steps: Optional[int]) -> tuple[list[dict], Optional[str]]:
    """(the valid prefix of training records, the first problem or None).

    Line i must be step i (0-based) of the example the configuration planned for it; the
    steps after a bad line depend on it, so the prefix stops there.
    """
    kept: list[dict] = []
    first_bad = bad[0] if bad else None
    for number, record in records:
        if first_bad is not None and number > first_bad:
            break
        i = len(kept)
        if not isinstance(record, dict) or record.get("step") != i:
            got = record.get("step") if isinstance(record, dict) else record
            return kept, f"train.jsonl line {number} is step {got!r}, expected step {i}"
        if train_ids is not None and (i >= len(train_ids) or record.get("example_id") != train_ids[i]):
            planned = train_ids[i] if i < len(train_ids) else "none"
            return kept, (f"train.jsonl line {number} (step {i}) is example {record.get('example_id')!r}, "
                          f"config.json planned {planned!r}")
        kept.append(record)
    if first_bad is not None:
        return kept, f"train.jsonl line {first_bad} is not JSON"
    if steps is not None and len(kept) > steps:
        return kept[:steps], f"train.jsonl has {len(kept)} steps, the run plans {steps}"
    return kept, None


def check_test(records: list[tuple[int, object]], bad: list[int], test_steps: Optional[list],
               done: int, num_test: Optional[int]) -> tuple[list[dict], list[str], list[dict]]:
    """(valid test records of completed steps in step order, problems, records of steps not yet
    completed). Each line stands alone: a bad one costs only its own step."""
    problems = [f"test.jsonl line {n} is not JSON" for n in bad]
    by_step: dict[int, dict] = {}
    pending: list[dict] = []
    planned = set(test_steps) if test_steps is not None else None
    for number, record in records:
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or (planned is not None and step not in planned):
            problems.append(f"test.jsonl line {number} is not a planned test step ({step!r})")
            continue
        predictions = record.get("predictions")
        if (not _is_number(record.get("accuracy")) or not isinstance(predictions, list)
                or (num_test is not None and len(predictions) != num_test)):
            problems.append(f"test.jsonl line {number} (step {step}) is incomplete")
            continue
        if step >= done:
            pending.append(record)  # written just before a kill cut its step short
            continue
        if step in by_step:
            problems.append(f"test.jsonl line {number} repeats step {step}")
            continue
        by_step[step] = record
    ordered = [by_step[t] for t in sorted(by_step)]
    if list(by_step) != sorted(by_step):
        problems.append("test.jsonl is out of step order")
    return ordered, problems, pending


@dataclass
class RunState:
    """What a run's records say, checked against its config.json (see ``inspect_run``)."""

    directory: Path
    config: Optional[dict] = None
    train: list = field(default_factory=list)
    test: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    complete: bool = False   # every planned step and test step is on disk
    train_problem: Optional[str] = None  # a bad training line that stops a resume (not a cut tail)

    @property
    def finished(self) -> bool:
        """Complete and consistent: the only state in which a run is trusted as done."""
        return self.complete and not self.problems

    @property
    def damage(self) -> str:
        return "; ".join(self.problems)

    @property
    def missing_tests(self) -> list[int]:
        """Planned test steps of completed steps that have no valid record."""
        resolved = (self.config or {}).get("resolved", {})
        done = self.steps_done
        have = {r["step"] for r in self.test}
        return [t for t in resolved.get("test_steps", []) if t < done and t not in have]

    @property
    def steps_done(self) -> int:
        resolved = (self.config or {}).get("resolved", {})
        if resolved.get("mode") == "zero_shot":
            return 1 if self.test else 0
        return len(self.train)


def plan_of(config: dict) -> tuple[Optional[list], Optional[int], Optional[list], Optional[int], str]:
    """(training ids, steps, test steps, test-set size, mode) planned by a config.json."""
    resolved = config.get("resolved") or {}
    test_set = config.get("test_set") or {}
    ids = test_set.get("ids")
    return (config.get("train_example_ids"), resolved.get("steps"), resolved.get("test_steps"),
            len(ids) if isinstance(ids, list) else None, resolved.get("mode") or "")


def inspect_run(directory) -> RunState:
    """Check a run's records against its config.json; never raises for bad content."""
    directory = Path(directory)
    state = RunState(directory)
    try:
        config = read_json(directory / CONFIG)
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        state.problems.append("no config.json")
        return state
    except (OSError, ValueError) as exc:
        state.problems.append(f"config.json unreadable ({exc})")
        return state
    state.config = config
    train_ids, steps, test_steps, num_test, mode = plan_of(config)
    if steps is None or test_steps is None:
        state.problems.append("config.json has no plan (resolved steps and test steps)")
        return state
    try:
        train_lines, train_bad, train_cut = parse_jsonl(directory / TRAIN)
        test_lines, test_bad, test_cut = parse_jsonl(directory / TEST)
    except OSError as exc:
        state.problems.append(f"records unreadable ({exc})")
        return state
    if mode == "zero_shot":
        train_ids = []
    state.train, problem = check_train(train_lines, train_bad, train_ids, steps)
    if problem:
        state.problems.append(problem)
        state.train_problem = problem
    if train_cut:
        state.problems.append("train.jsonl ends with a line cut short")
    done = 1 if mode == "zero_shot" else len(state.train)
    state.test, problems, pending = check_test(test_lines, test_bad, test_steps, done, num_test)
    state.problems += problems
    if test_cut:
        state.problems.append("test.jsonl ends with a line cut short")
    if pending and mode != "zero_shot" and len(state.train) == steps:
        state.problems.append(f"test.jsonl has steps after the last one ({[r['step'] for r in pending]})")
    if mode == "zero_shot":
        state.complete = bool(state.test)
    else:
        state.complete = len(state.train) == steps and not state.missing_tests
    if mode != "zero_shot" and len(state.train) == steps and state.missing_tests:
        state.problems.append(f"test steps {state.missing_tests} are missing from test.jsonl")
    return state


def unresumable(directory: Path, problem: str) -> DamagedRecords:
    return DamagedRecords(f"{directory}: {problem}; the steps after it depend on it, so the run cannot resume: "
                          f"delete that line and the ones after it to recompute them, or pass --overwrite")


class RunRecords:
    """Appends and reads the records of one experiment directory."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    @property
    def exists(self) -> bool:
        return (self.directory / CONFIG).is_file()

    def config(self) -> dict:
        return read_json(self.directory / CONFIG)

    def results(self) -> Optional[dict]:
        path = self.directory / RESULTS
        return read_json(path) if path.is_file() else None

    def finished(self) -> bool:
        """Every planned step is on disk and the records agree with config.json."""
        return inspect_run(self.directory).finished

    def has_steps(self) -> bool:
        """Whether any line of a completed step may be on disk (a run without is no run)."""
        for name in (TRAIN, TEST):
            try:
                if b"\n" in (self.directory / name).read_bytes():
                    return True
            except FileNotFoundError:
                pass
        return False

    def create(self, config: dict) -> None:
        """Start a fresh run: remove old records, write the configuration."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in (TRAIN, TEST, RESULTS, LOG):
            (self.directory / name).unlink(missing_ok=True)
        write_json_atomic(self.directory / CONFIG, config)

    def remove_leftovers(self) -> list[Path]:
        """Temporary files of atomic writes cut short by a kill (call under the run's lock)."""
        return remove_leftovers(self.directory, (CONFIG, RESULTS, TRAIN, TEST))

    def load_for_resume(self, config: Optional[dict] = None) -> tuple[list[dict], list[dict], list[str]]:
        """(train, test, notes) of the complete steps, the files repaired for appending.

        A training line cut short by a kill is removed; any other bad training line stops the
        resume (the steps after it depend on it): DamagedRecords. Test lines stand alone: bad,
        repeated or orphaned ones are dropped (``notes`` says which), valid ones are all kept,
        and test steps missing before the resume point are left for the caller to recompute.
        """
        config = self.config() if config is None else config
        train_ids, steps, test_steps, num_test, mode = plan_of(config)
        path = self.directory / TRAIN
        lines, bad, cut = parse_jsonl(path)
        if mode == "zero_shot":
            train, problem = [], (f"train.jsonl has {len(lines)} lines; a zero-shot run has none" if lines else None)
        else:
            train, problem = check_train(lines, bad, train_ids, steps)
        if problem:
            raise unresumable(self.directory, problem)
        if cut:
            self._rewrite(TRAIN, train)
        done = 1 if mode == "zero_shot" else len(train)
        t_lines, t_bad, t_cut = parse_jsonl(self.directory / TEST)
        test, notes, pending = check_test(t_lines, t_bad, test_steps, done, num_test)
        if mode == "zero_shot":
            test = test[:1]
        if notes or pending or t_cut:
            self._rewrite(TEST, test)
        return train, test, notes

    def append(self, name: str, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with open(self.directory / name, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def append_train(self, record: dict) -> None:
        self.append(TRAIN, record)

    def append_test(self, record: dict) -> None:
        self.append(TEST, record)

    def rewrite_test(self, records: Iterable[dict]) -> None:
        self._rewrite(TEST, sorted(records, key=lambda r: r["step"]))

    def write_results(self, summary: dict) -> None:
        write_json_atomic(self.directory / RESULTS, summary)

    def _rewrite(self, name: str, records: Iterable[dict]) -> None:
        path = self.directory / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def find_runs(root) -> list[Path]:
    """Every experiment directory (one holding config.json) below ``root``."""
    return sorted(p.parent for p in Path(root).rglob(CONFIG))
