"""The online ICRL experiment (published protocol), top to bottom.

Each step t: the strategy picks the context from the history with default_rng(seed + t);
with ICRL the training example is predicted with that context (generation seed seed + t),
rewarded (1 if right) and its shown feedback possibly flipped; at a test step every test
prompt is predicted with the same context and seed; then the episode joins the history.
Supervised ICL makes no training call (the episode carries the gold answer) and stops at
the first test step at or after max_context_examples. Zero-shot is one test at step 0.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from . import __version__
from .cli import RUNTIME_ARGS, SECRET_ARGS, identity
from .context import make_strategy, replay
from .episode import Episode
from .errors import UsageError
from .feedback import shown_feedback
from .prompts import build_messages
from .lock import DirectoryLock
from . import signals, verify
from .diskfull import OneLineFileHandler
from .masking import ScrubFilter, scrub
from .records import (TRAIN, DamagedRecords, RunRecords, experiment_dir, inspect_run, max_context_path, read_json,
                      remove_leftovers, unresumable, write_json_atomic)
from .tasks import load_task

log = logging.getLogger("icrl")
# Arguments added after runs were recorded, with the value those runs had.
ADDED_ARG_DEFAULTS = {"published_tokenization": False}


# -- the plan: pure functions of the arguments ------------------------------------------------
def mode_of(icrl: bool, max_examples: int) -> str:
    """As published: no context examples means zero-shot, whatever --icrl says."""
    if max_examples == 0:
        return "zero_shot"
    return "icrl" if icrl else "icl"


def plan_steps(mode: str, num_train: int, test_every: int, max_examples: int) -> tuple[int, list[int]]:
    """(number of steps, test steps): 0, every t with (t + 1) % test_every == 0, and the last."""
    if mode == "zero_shot":
        return 1, [0]
    steps = num_train
    tests = sorted({0, steps - 1} | {t for t in range(steps) if (t + 1) % test_every == 0})
    if mode == "icl":  # stop at the first test step at or after a full context
        last = next((t for t in tests if t >= max_examples), steps - 1)
        steps, tests = last + 1, [t for t in tests if t <= last]
    return steps, tests


def summarize(train: Sequence[dict], test: Sequence[dict], steps: int, mode: str) -> dict:
    """results.json: final/best test accuracy, regret, accuracy per test step, time per step."""
    done = len(test) > 0 if mode == "zero_shot" else len(train) == steps
    accuracy = {r["step"]: r["accuracy"] for r in test}
    best = max(accuracy.items(), key=lambda kv: (kv[1], -kv[0])) if accuracy else (None, None)
    predicted = [r["accuracy"] for r in train if r["accuracy"] is not None]
    # A training record's time covers its whole step, the step's test included.
    times = [r["time_s"] for r in train] or [r["time_s"] for r in test]
    return {
        "finished": done, "mode": mode, "total_steps": steps,
        "steps_completed": (1 if test else 0) if mode == "zero_shot" else len(train),
        "final_test_accuracy": test[-1]["accuracy"] if test else None,
        "best_test_accuracy": best[1], "best_test_step": best[0],
        "regret": (len(predicted) - sum(predicted)) if mode == "icrl" else None,
        "train_accuracy": (sum(predicted) / len(predicted)) if predicted else None,
        "test_accuracy": {str(k): v for k, v in accuracy.items()},
        "mean_step_time_s": (sum(times) / len(times)) if times else None,
        "total_time_s": sum(times),
    }


def per_class_accuracy(answers: Sequence[str], correct: Sequence[int]) -> dict:
    totals: dict = {}
    for answer, ok in zip(answers, correct):
        n, k = totals.get(answer, (0, 0))
        totals[answer] = (n + 1, k + ok)
    return {label: k / n for label, (n, k) in sorted(totals.items())}


# -- environment facts for the configuration record --------------------------------------------
def environment() -> dict:
    from importlib import metadata

    packages = {}
    for name in ("torch", "transformers", "datasets", "numpy", "pandas", "vllm", "tokenizers", "gguf", "openai"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    repo = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=5).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    device = "cpu"
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            device = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return {"icrl": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "packages": packages, "git_commit": commit, "git_dirty": dirty, "device": device}


# -- the run ------------------------------------------------------------------------------------
class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived (Ctrl-C arrives as KeyboardInterrupt). A BaseException like
    KeyboardInterrupt, so that no ``except Exception`` (in a library's import) swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Experiment:
    """One experiment: its task, data, backend, strategy and records.

    ``run()`` first locks the run directory (one writer per run; the kernel releases the
    lock if the process dies) and decides from the records alone, before loading data or a
    model, whether the run is new, resumed or finished. ``backend``: an already loaded
    backend to use instead of loading one from the arguments (a sweep shares one).
    """

    def __init__(self, args, backend=None):
        self.args = args
        self.backend = backend
        self.task = None
        self.out_dir = experiment_dir(args.output_dir, vars(args))
        self.records = RunRecords(self.out_dir)
        self.lock = DirectoryLock(self.out_dir)
        self.model_calls = 0
        self.resuming = False
        self.old_config: Optional[dict] = None
        self.steps_done = 0
        self.extension: Optional[int] = None  # steps a larger --train_k asks of a recorded run

    def claim(self) -> None:
        """Lock the run directory and make sure it is writable (before anything loads)."""
        self.created = _first_missing(self.out_dir)
        try:
            self.lock.acquire()
            with tempfile.TemporaryFile(dir=self.out_dir):
                pass
        except OSError as exc:
            self.lock.release()
            raise UsageError(f"cannot write the run directory {self.out_dir} under --output_dir "
                             f"{self.args.output_dir!r}: {exc.strerror or exc}") from None
        for path in self.records.remove_leftovers():
            log.info("removed %s, left by a write cut short", path.name)

    # Checks on the records alone (no data, no model): new, resumed, finished or refused.
    def check_existing(self):
        """The run's RunState when it is finished and its records check out, else None
        (``self.resuming`` says whether there is a run to continue)."""
        a = self.args
        self.resuming = False
        if not self.records.has_steps():
            return None  # no completed step: not a run; (re)start it with these arguments
        try:
            config = self.records.config()
            if not isinstance(config, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            if a.overwrite:
                return None
            why = "has records but no config.json" if isinstance(exc, FileNotFoundError) else \
                f"has an unreadable config.json ({exc})"
            raise DamagedRecords(f"{self.out_dir} {why}; restore it, or pass --overwrite to start again") from None
        old = config.get("args", {})
        new = json.loads(json.dumps(identity(a)))
        old = {**ADDED_ARG_DEFAULTS, **old}  # records written before an argument existed
        # train_k is compared through the plan below: a larger one extends the run
        differing = sorted(k for k in set(old) | set(new)
                           if k not in RUNTIME_ARGS and k != "train_k" and old.get(k) != new.get(k))
        if a.overwrite and (differing or not config.get("runtime_args", {}).get("overwrite")):
            return None  # replace it (a run that --overwrite itself started is resumed instead)
        if differing:
            details = "; ".join(f"--{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in differing)
            raise UsageError(f"{self.out_dir} holds a run with other arguments ({details}); "
                             f"pass --overwrite to replace it")
        self.resuming, self.old_config = True, config
        self.extension = self._check_length(config)
        state = inspect_run(self.out_dir)
        self.steps_done = state.steps_done
        contents = None if state.train_problem else verify.needs_repair(config, state.train, state.test, self.out_dir)
        if state.finished and self.extension is None and not contents:
            return state
        if state.train_problem:
            raise unresumable(self.out_dir, state.train_problem)
        if state.problems or contents:
            _say(f"records of {self.out_dir} need repair ({state.damage or contents}); resuming to repair them")
        return None

    def _check_length(self, config: dict) -> Optional[int]:
        """The number of steps this --train_k asks of a recorded run, when more than it has
        (an extension), else None; fewer is a one-line error. Computed from config.json alone
        (training pool size, resolved context size), so before any data or model loads."""
        a = self.args
        resolved, dataset = config.get("resolved") or {}, config.get("dataset") or {}
        recorded = resolved.get("steps")
        try:
            pool = dataset["num_train"] - resolved.get("num_exemplars", 0)
            num_train = pool if a.train_k == -1 else min(a.train_k, pool)
            steps, _ = plan_steps(resolved["mode"], num_train, a.test_every, resolved["max_context_examples"])
        except (KeyError, TypeError):
            return None  # an incomplete plan: the plan check after the data load reports it
        if not isinstance(recorded, int) or steps == recorded:
            return None
        if steps < recorded:
            before = config.get("args", {}).get("train_k")
            raise UsageError(f"{self.out_dir} holds a run of {recorded} steps (--train_k {before}); "
                             f"--train_k {a.train_k} gives {steps}: pass --train_k {before} to resume or "
                             f"report it, a larger one to extend it, or --overwrite to replace it")
        return steps

    def _extend(self, config: dict) -> None:
        """Continue a recorded run to more steps: the same training stream, so its records
        stay; config.json gets the longer plan and an ``extended`` entry (from, to steps).
        The shorter run's last test step stays a test step."""
        a, old = self.args, config.get("resolved", {})
        before = old["steps"]
        if (old.get("mode"), old.get("max_context_examples")) != (self.mode, self.max_examples):
            raise UsageError(f"{self.out_dir} was started with another plan (mode {old.get('mode')!r}, "
                             f"{old.get('max_context_examples')!r} context examples there; {self.mode!r}, "
                             f"{self.max_examples!r} now); pass --overwrite to start again")
        ids = [e.id for e in self.train[:self.steps]]
        if ids[:before] != config.get("train_example_ids"):
            raise UsageError(f"{self.out_dir}: the training examples of its {before} steps are not the first "
                             f"{before} of --train_k {a.train_k}; pass --overwrite to start again")
        self.test_steps = sorted(set(self.test_steps) | set(old["test_steps"]))
        config = json.loads(json.dumps(config))
        config["extended"] = config.get("extended", []) + [{
            "from": before, "to": self.steps, "train_k_before": config["args"].get("train_k"),
            "train_k": a.train_k, "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}]
        config["args"]["train_k"] = a.train_k
        config["resolved"].update(steps=self.steps, test_steps=self.test_steps, train_examples=len(self.train))
        config["train_example_ids"] = ids
        write_json_atomic(self.out_dir / "config.json", config)
        self.old_config = config
        state = inspect_run(self.out_dir)
        self.records.write_results(summarize(state.train, state.test, self.steps, self.mode))
        _say(f"extending {self.out_dir} from {before} to {self.steps} steps (--train_k {a.train_k})")

    def _check_same_data(self, old: dict) -> None:
        """A resumed run must see the dataset and test set it started with."""
        new = self.config_record_data()
        if old.get("dataset", {}).get("fingerprint") != new["dataset"]["fingerprint"]:
            raise UsageError(f"{self.out_dir}: the dataset changed since this run started (fingerprint "
                             f"{old.get('dataset', {}).get('fingerprint')!r} there, "
                             f"{new['dataset']['fingerprint']!r} now); pass --overwrite to start again")
        old_test = old.get("test_set", {})
        for key in ("ids", "prompts"):
            if old_test.get(key) != new["test_set"][key]:
                raise UsageError(f"{self.out_dir}: the test set's {key} changed since this run started; "
                                 f"pass --overwrite to start again")

    def load_data(self) -> None:
        a = self.args
        self.task = task = load_task(a.task_name, a.data_dir)
        self.exemplars = task.exemplars(a.exemplars_per_label, a.training_seed) if a.exemplars_per_label else []
        if a.max_context_examples and self.exemplars and a.max_context_examples <= len(self.exemplars):
            raise UsageError(f"no room for context episodes: the {len(self.exemplars)} exemplars fill the "
                             f"{a.max_context_examples} context examples (the published runner subtracts "
                             f"them); lower --exemplars_per_label or raise --max_context_examples")
        self.train = [] if a.max_context_examples == 0 else task.training_examples(a.train_k, a.training_seed)
        self.test = task.test_examples(a.test_k, a.test_seed)
        if a.max_context_examples != 0 and not self.train:
            if task.num_train == 0:
                raise UsageError(f"{task.name} has no training examples: its training split is empty")
            raise UsageError(f"{task.name} has no training examples left after the "
                             f"{len(self.exemplars)} exemplars")
        if not self.test:
            raise UsageError(f"{task.name} has no test examples: its test split is empty")
        if a.max_context_examples != 0 and a.train_k != -1 and len(self.train) < a.train_k:
            _say(f"warning: --train_k {a.train_k} but {task.name} has {len(self.train)} training examples "
                 f"(after exemplars): running {len(self.train)} steps")
        if a.test_k != -1 and len(self.test) < a.test_k:
            _say(f"warning: --test_k {a.test_k} but {task.name} has {len(self.test)} test examples: "
                 f"testing on {len(self.test)}")

    def load_backend(self) -> None:
        from .backends import load_backend

        if self.backend is not None:
            return  # given (a sweep's shared backend)
        a = self.args
        self.backend = load_backend(
            a.model_name, a.backend, device=a.device, dtype=a.dtype, batch_size=a.batch_size,
            hf_token=a.hf_token, max_model_len=a.max_model_len, eot_token=a.eot_token,
            tensor_parallel_size=a.tensor_parallel_size, pipeline_parallel_size=a.pipeline_parallel_size,
            distributed_executor_backend=a.distributed_executor_backend,
            gpu_memory_utilization=a.gpu_memory_utilization, enforce_eager=a.enforce_eager,
            rope_scaling=a.rope_scaling, seed=a.seed, verbose=a.verbose,
            published_tokenization=a.published_tokenization,
            base_url=a.base_url, api_key=a.api_key, api_model=a.api_model, api_mode=a.api_mode,
            max_concurrency=a.max_concurrency, timeout=a.timeout, max_retries=a.max_retries)

    def resolve_max_examples(self) -> int:
        """The context size, as the published runner resolves it.

        --max_context_examples, or when omitted the published search's ``left + 1`` for this
        model, task, mode (ICRL or ICL system prompt) and window, cached per model and task
        under the key ``<icrl|icl>@<window>``. Either way the exemplars are then subtracted
        (published: ``max(0, n - exemplars)``; here no room left is an error). An explicit 0
        (zero-shot) stays 0."""
        a = self.args
        if a.max_context_examples == 0:
            return 0
        fit = a.max_context_examples if a.max_context_examples is not None else self._automatic_size()
        if self.exemplars:
            fit -= len(self.exemplars)
            if fit < 1:
                raise UsageError(f"no room for context episodes: {len(self.exemplars)} exemplars fill the "
                                 f"{fit + len(self.exemplars)} context examples (the published runner subtracts "
                                 f"them); lower --exemplars_per_label or raise --max_context_examples")
        return fit

    def _automatic_size(self) -> int:
        a = self.args
        path = max_context_path(a.output_dir, a.model_name, a.task_name)
        window = self.backend.max_model_len
        key = f"{'icrl' if a.icrl else 'icl'}@{window}"
        remove_leftovers(path.parent, [path.name], older_than_s=3600)
        sizes: dict = {}
        try:
            cached = read_json(path) if path.is_file() else None
            if cached is not None:
                if not isinstance(cached, dict):
                    raise ValueError("not a cache record")
                if "sizes" in cached:
                    if not isinstance(cached["sizes"], dict):
                        raise ValueError("not a cache record")
                    sizes = {k: v for k, v in cached["sizes"].items()
                             if isinstance(v, int) and not isinstance(v, bool) and v > 0}
                else:  # the format before issue 10 (the largest fitting n, one fewer): not reused
                    log.info("replacing the old-format cache %s (it held one fewer episode)", path)
        except (OSError, ValueError) as exc:
            log.warning("ignoring the unreadable cache %s (%s); finding the size again", path, exc)
        if key in sizes:
            return sizes[key]
        from .maxlen import find_max_examples

        log.info("finding how many episodes fit %d tokens (%s; cached in %s)", window, key, path)
        fit = find_max_examples(self.backend.chat, self.task, window, icrl=a.icrl)
        sizes[key] = fit
        write_json_atomic(path, {"sizes": dict(sorted(sizes.items()))})
        return fit

    def config_record_data(self) -> dict:
        task = self.task
        return {
            "dataset": {"task": task.name, "fingerprint": task.fingerprint(), "labels": task.labels,
                        "num_train": task.num_train, "num_test": task.num_test},
            "test_set": {"ids": [e.id for e in self.test], "prompts": [task.prompt(e) for e in self.test],
                         "answers": [task.answer(e) for e in self.test]},
        }

    def config_record(self) -> dict:
        a, task = self.args, self.task
        args = {k: v for k, v in sorted(vars(a).items()) if k not in SECRET_ARGS}
        return scrub({
            "format_version": 1, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "args": json.loads(json.dumps(identity(a))), "runtime_args": {k: args[k] for k in RUNTIME_ARGS if k in args},
            "resolved": {"mode": self.mode, "max_context_examples": self.max_examples, "steps": self.steps,
                         "test_steps": self.test_steps, "num_exemplars": len(self.exemplars),
                         "train_examples": len(self.train), "test_examples": len(self.test)},
            "backend": self.backend.describe(), "environment": environment(),
            **self.config_record_data(),
            "train_example_ids": [e.id for e in self.train[:self.steps]] if self.mode != "zero_shot" else [],
            "exemplars": [{"id": e.id, "prompt": task.prompt(e), "answer": task.answer(e)} for e in self.exemplars],
        })

    def _check_same_plan(self, config: dict) -> None:
        """A resumed run must continue the plan it started with (e.g. the same context size
        when --max_context_examples is found from the window); the last steps of the shorter
        runs an extended run grew from stay test steps."""
        old = config.get("resolved", {})
        kept = {e["from"] - 1 for e in config.get("extended", []) if isinstance(e, dict) and "from" in e}
        self.test_steps = sorted(set(self.test_steps) | {t for t in kept if 0 <= t < self.steps})
        new = {"mode": self.mode, "max_context_examples": self.max_examples, "steps": self.steps,
               "test_steps": self.test_steps}
        differing = [k for k in new if old.get(k) != new[k]]
        if differing:
            details = "; ".join(f"{k}: {old.get(k)!r} there, {new[k]!r} now" for k in differing)
            raise UsageError(f"{self.out_dir} was started with another plan ({details}); "
                             f"pass --overwrite to start again")

    # -- model calls ---------------------------------------------------------------------------
    def predict(self, rendered: list[str], seed: int, progress=None) -> list[str]:
        options = {} if progress is None else {"progress": progress}
        out = self.backend.predict(rendered, self.task.labels, self.args.temperature, seed, **options)
        if self.model_calls < self.args.debug_k:
            log.info("model call %d (%d prompts, seed %d); first prompt:\n%s\n-> %s",
                     self.model_calls, len(rendered), seed, rendered[0], out if len(out) <= 20 else out[:20])
        self.model_calls += 1
        return out

    def render(self, context: Sequence[Episode], prompt: str) -> str:
        messages, prefix = build_messages(
            self.task, context, prompt, self.mode, omit_feedback=self.args.icrl_omit_feedback,
            exemplars=self.exemplar_pairs, supports_system_role=self.backend.supports_system_role)
        return self.backend.render(messages, prefix)

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> dict:
        self.claim()
        try:
            return self._run()
        finally:
            self._release()

    def _release(self) -> None:
        """Unlock; a directory this process created and that holds no step is removed again
        (a run that failed or was stopped before its first step leaves nothing behind)."""
        created = self.created is not None and self.lock.held and not self.records.has_steps()
        if created:
            for name in ("config.json", "results.json", "log.txt", "train.jsonl", "test.jsonl"):
                (self.out_dir / name).unlink(missing_ok=True)
        self.lock.release(remove=created)
        if created:
            directory = self.out_dir
            while True:
                try:
                    directory.rmdir()
                except OSError:
                    break
                if directory == self.created:
                    break
                directory = directory.parent

    def _run(self) -> dict:
        a = self.args
        finished = self.check_existing()
        if finished is not None:
            resolved = finished.config["resolved"]
            summary = summarize(finished.train, finished.test, resolved["steps"], resolved["mode"])
            try:
                current = self.records.results()
            except (OSError, ValueError):
                current = None
            if current != summary:  # missing, unreadable or stale: it is a function of the records
                self.records.write_results(summary)
            if verify.data_at_hand(self.load_data):  # then config.json must match it
                self._check_same_data(finished.config)
                verify.check_labels(finished.config, self.task.labels, self.out_dir)
            print(f"already finished: {self.out_dir}")
            return summary
        self.load_data()
        if self.resuming:
            self._check_same_data(self.old_config)
            verify.check_labels(self.old_config, self.task.labels, self.out_dir)
        task = self.task
        wandb = _wandb_module() if a.wandb else None
        self.load_backend()
        self.max_examples = self.resolve_max_examples()
        self.mode = mode_of(a.icrl, self.max_examples)
        self.steps, self.test_steps = plan_steps(self.mode, len(self.train), a.test_every, self.max_examples)
        self.exemplar_pairs = [(task.prompt(e), task.answer(e)) for e in self.exemplars]
        strategy = None if self.mode == "zero_shot" else make_strategy(
            a.context_strategy_name, self.max_examples, a.context_p_keep, a.max_contexts,
            a.approximate_context_sampling_method)

        if self.resuming and self.extension is not None:
            self._extend(self.old_config)
        elif self.resuming:
            self._check_same_plan(self.old_config)
        else:
            self.records.create(self.config_record())
        handler = _attach_log_file(self.out_dir)
        try:
            log.info("arguments: %s", json.dumps(identity(a)))
            log.info("mode %s, %d context episodes, %d steps, test steps %s",
                     self.mode, self.max_examples, self.steps, self.test_steps)
            config = self.old_config if self.resuming else self.records.config()
            train_recs, test_recs, notes = self.records.load_for_resume(config)
            train_recs, test_recs, fixes = verify.repair(config, train_recs, test_recs, self.out_dir)
            if fixes:  # content that follows from the records: rewritten (dropped test steps are recomputed)
                self.records._rewrite(TRAIN, train_recs)
                self.records.rewrite_test(test_recs)
                _say(f"repaired {self.out_dir}: {'; '.join(fixes)}")
            for note in notes:
                _say(f"warning: {self.out_dir}: dropped {note}")
            history = [Episode(r["prompt"], r["prediction"], r["feedback"], r["answer"], r["accuracy"]) for r in train_recs]
            for r, example in zip(train_recs, self.train):
                if r["example_id"] != example.id:
                    raise UsageError(f"{self.out_dir}: step {r['step']} used example {r['example_id']}, the data "
                                     f"now gives {example.id}; the dataset changed, pass --overwrite")
            if self.mode != "zero_shot":
                replay(strategy, history, a.seed)
            start = len(train_recs) if self.mode != "zero_shot" else len(test_recs)
            self.steps_done = start
            if self.resuming:
                _say(f"resuming {self.out_dir} at step {start} of {self.steps}")
            missing = [t for t in self.test_steps if t < start and t not in {r["step"] for r in test_recs}]
            if missing and self.mode != "zero_shot":
                _say(f"recomputing test steps {missing}, missing from {self.out_dir / 'test.jsonl'}")
                for t in missing:
                    context = [history[i] for i in train_recs[t]["context"]]
                    test_recs.append(self._test_step(t, context, train_recs[t]["context"], train_recs[t]["metrics"]))
                test_recs.sort(key=lambda r: r["step"])
                self.records.rewrite_test(test_recs)
                self.records.write_results(summarize(train_recs, test_recs, self.steps, self.mode))
            run_wandb = wandb.init(project="icrl", dir=str(self.out_dir), config=identity(a),
                                   name=str(self.out_dir.relative_to(a.output_dir))) if wandb else None
            self._loop(strategy, history, train_recs, test_recs, start, run_wandb)
            summary = summarize(train_recs, test_recs, self.steps, self.mode)
            self.records.write_results(summary)
            if run_wandb:
                run_wandb.summary.update({k: v for k, v in summary.items() if not isinstance(v, dict)})
                run_wandb.finish()
            return summary
        except (KeyboardInterrupt, Interrupted):
            previous = _ignore_signals()
            try:
                self._save_progress()
            finally:
                for signum, old in previous.items():
                    signal.signal(signum, old if old is not None else signal.SIG_DFL)
            raise
        finally:
            logging.getLogger("icrl").removeHandler(handler)
            handler.close()

    def _save_progress(self) -> None:
        """results.json from what is on disk (called when interrupted)."""
        state = inspect_run(self.out_dir)
        self.steps_done = state.steps_done
        if state.config is not None:
            resolved = state.config["resolved"]
            self.records.write_results(summarize(state.train, state.test, resolved["steps"], resolved["mode"]))
        log.info("interrupted at step %d", self.steps_done)

    def _test_step(self, t: int, context, context_ids, metrics, bar=None) -> dict:
        """Predict every test prompt with step t's context and seed; append and return the record.
        An enabled progress ``bar`` shows ``testing i/n`` in its postfix while the prompts run."""
        task = self.task
        test_answers = [task.answer(e) for e in self.test]
        test_tic = time.perf_counter()
        progress = None
        if bar is not None and not bar.disable:
            done = [0]

            def progress(n: int) -> None:
                done[0] += n
                bar.set_postfix_str(f"testing {done[0]}/{len(self.test)}")

            progress(0)
        predictions = self.predict([self.render(context, task.prompt(e)) for e in self.test], self.args.seed + t,
                                   progress)
        correct = [int(p == g) for p, g in zip(predictions, test_answers)]
        record = {"step": t, "accuracy": sum(correct) / len(correct),
                  "per_class_accuracy": per_class_accuracy(test_answers, correct),
                  "predictions": predictions, "context_size": len(context), "context": list(context_ids),
                  "metrics": metrics, "time_s": time.perf_counter() - test_tic}
        log.info("step %d: test accuracy %.4f", t, record["accuracy"])
        return record

    def _loop(self, strategy, history, train_recs, test_recs, start, run_wandb):
        a, task = self.args, self.task
        index_of = {id(e): i for i, e in enumerate(history)}
        tests = set(self.test_steps)
        bar = _progress(self.steps, start, a.progress, f"{task.name} {a.context_strategy_name or 'zero-shot'}")
        for t in range(start, self.steps):
            signals.check()  # a stop that arrived inside an import
            self.lock.check()  # still our directory
            tic = time.perf_counter()
            if self.mode == "zero_shot":
                context, metrics = [], {}
            else:
                context = strategy.select(history, np.random.default_rng(a.seed + t))
                metrics = strategy.metrics()
            context_ids = [index_of[id(e)] for e in context]

            episode = None
            if self.mode != "zero_shot":
                example = self.train[t]
                prompt, answer = task.prompt(example), task.answer(example)
                if self.mode == "icrl":
                    prediction = self.predict([self.render(context, prompt)], a.seed + t)[0]
                    accuracy = int(prediction == answer)
                    feedback = shown_feedback(accuracy, a.seed, t, a.icrl_flip_feedback, a.icrl_flip_feedback_prob)
                    episode = Episode(prompt, prediction, feedback, answer, accuracy)
                else:
                    episode = Episode(prompt, None, None, answer, None)

            if t in tests:
                record = self._test_step(t, context, context_ids, metrics, bar)
                self.records.append_test(record)
                test_recs.append(record)
                if run_wandb:
                    run_wandb.log({"test/accuracy": record["accuracy"]}, step=t)

            if episode is not None:
                record = {"step": t, "example_id": self.train[t].id, "prompt": episode.prompt,
                          "prediction": episode.prediction, "feedback": episode.feedback,
                          "answer": episode.answer, "accuracy": episode.accuracy,
                          "context_size": len(context), "context": context_ids, "metrics": metrics,
                          "time_s": time.perf_counter() - tic}
                self.records.append_train(record)
                train_recs.append(record)
                index_of[id(episode)] = len(history)
                history.append(episode)
                if run_wandb and episode.accuracy is not None:
                    run_wandb.log({"train/accuracy": episode.accuracy, "train/context_size": len(context)}, step=t)
            self.steps_done = t + 1
            if t in tests:
                self.records.write_results(summarize(train_recs, test_recs, self.steps, self.mode))
            bar.set_postfix(_postfix(train_recs, test_recs), refresh=False)  # replaces "testing i/n"
            bar.update(1)
        bar.close()


def _first_missing(path: Path) -> Optional[Path]:
    """The outermost folder of ``path`` that does not exist yet (None if it exists)."""
    missing = None
    for folder in [path, *path.parents]:
        if folder.exists():
            break
        missing = folder
    return missing


def _postfix(train_recs, test_recs) -> dict:
    scored = [r["accuracy"] for r in train_recs if r["accuracy"] is not None]
    out = {}
    if scored:
        out["train_acc"] = f"{sum(scored) / len(scored):.3f}"
    if test_recs:
        out["test_acc"] = f"{test_recs[-1]['accuracy']:.3f}"
    return out


def _progress(total: int, start: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, disable=not enabled, desc=desc, unit="step", dynamic_ncols=True)


def _wandb_module():
    try:
        import wandb
    except ImportError:
        raise UsageError("--wandb needs the wandb package: pip install wandb") from None
    os.environ.setdefault("WANDB_MODE", "offline")
    return wandb


def _attach_log_file(directory: Path) -> logging.Handler:
    handler = OneLineFileHandler(directory / "log.txt", encoding="utf-8")  # a full disk: one line, once
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    handler.addFilter(ScrubFilter())
    # Only this thread's messages: runs of a sweep in other threads have their own log.txt.
    thread = threading.get_ident()
    handler.addFilter(lambda record: record.thread == thread)
    root = logging.getLogger("icrl")
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    return handler


WRITE_ERRORS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def _ignore_signals() -> dict:
    """While saving progress after an interruption, a second signal must not cut it short.
    Returns the handlers to restore (none outside the main thread, where signals cannot be set;
    a sweep's main thread holds them there)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {signum: signal.getsignal(signum) for signum in HANDLED_SIGNALS}
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    return previous


def _say(message: str) -> None:
    """A line for the user on the console, also in the run's log."""
    print(message, file=sys.stderr, flush=True)
    log.info(message)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of run_experiment.py: exit 0 on success, 2 on bad input, 128 + signal number
    when interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)."""
    from .cli import parse_args

    from_script, argv = argv is None, sys.argv[1:] if argv is None else argv
    experiment = None
    previous, stopped = signals.install(_raise_interrupted), False
    try:
        args = parse_args(argv)
        _console_logging(args.verbose)
        if args.demo:
            print("no arguments: running the embedded demo (SmolLM2-135M on trec_coarse, explorative ICRL)")
        experiment = Experiment(args)
        signals.check()
        summary = experiment.run()
    except UsageError as exc:
        print(f"error: {scrub(str(exc))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted) as exc:
        signals.ignore_all()  # a second signal must not cut the exit short
        stopped = True
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        step = experiment.steps_done if experiment is not None else 0
        signals.say(f"interrupted at step {step}; rerun the same command to resume")
        return 128 + int(signum)
    except OSError as exc:
        if exc.errno not in WRITE_ERRORS:
            raise
        where = f" {exc.filename}" if exc.filename else ""
        print(f"error: cannot write{where}: {exc.strerror}; free space or fix permissions, then rerun the "
              f"same command to resume", file=sys.stderr)
        return 2
    finally:
        if not (stopped and from_script):  # the script exits with signals ignored; callers get theirs back
            signals.restore(previous)
    acc = summary.get("final_test_accuracy")
    print(f"results: {experiment.out_dir}")
    print(f"final test accuracy {acc:.4f}" if isinstance(acc, float) and not math.isnan(acc) else "no test accuracy",
          f"| regret {summary['regret']}" if summary.get("regret") is not None else "")
    return 0


def _console_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    handler.addFilter(ScrubFilter())
    logger = logging.getLogger("icrl")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
