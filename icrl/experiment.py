"""The online ICRL experiment (published protocol), top to bottom.

Each step t: the strategy picks the context from the history with default_rng(seed + t);
with ICRL the training example is predicted with that context (generation seed seed + t),
rewarded (1 if right) and its shown feedback possibly flipped; at a test step every test
prompt is predicted with the same context and seed; then the episode joins the history.
Supervised ICL makes no training call (the episode carries the gold answer) and stops at
the first test step at or after max_context_examples. Zero-shot is one test at step 0.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from . import __version__
from .cli import RUNTIME_ARGS, identity
from .context import make_strategy, replay
from .episode import Episode
from .errors import UsageError
from .feedback import shown_feedback
from .prompts import build_messages
from .records import RunRecords, experiment_dir, max_context_path, read_json, write_json_atomic
from .tasks import load_task

log = logging.getLogger("icrl")


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
        "finished": done, "mode": mode, "steps_completed": len(train), "total_steps": steps,
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
    for name in ("torch", "transformers", "datasets", "numpy", "pandas", "vllm", "tokenizers", "gguf"):
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
class Experiment:
    """One experiment: its task, data, backend, strategy and records."""

    def __init__(self, args):
        self.args = args
        self.task = load_task(args.task_name, args.data_dir)
        self.out_dir = experiment_dir(args.output_dir, vars(args))
        self.records = RunRecords(self.out_dir)
        self.model_calls = 0

    # Checks that need the data but no model: an existing run with other arguments, or finished.
    def check_existing(self) -> bool:
        """True when the run is already finished (nothing to do)."""
        if not self.records.exists or self.args.overwrite:
            return False
        old = self.records.config().get("args", {})
        new = json.loads(json.dumps(identity(self.args)))
        differing = sorted(k for k in set(old) | set(new) if k not in RUNTIME_ARGS and old.get(k) != new.get(k))
        if differing:
            details = "; ".join(f"--{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in differing)
            raise UsageError(f"{self.out_dir} holds a run with other arguments ({details}); "
                             f"pass --overwrite to replace it")
        return self.records.finished()

    def load_data(self) -> None:
        a, task = self.args, self.task
        self.exemplars = task.exemplars(a.exemplars_per_label, a.training_seed) if a.exemplars_per_label else []
        self.train = [] if a.max_context_examples == 0 else task.training_examples(a.train_k, a.training_seed)
        self.test = task.test_examples(a.test_k, a.test_seed)
        if a.max_context_examples != 0 and not self.train:
            raise UsageError(f"{task.name} has no training examples left after the exemplars")

    def load_backend(self) -> None:
        from .backends import load_backend

        a = self.args
        self.backend = load_backend(
            a.model_name, a.backend, device=a.device, dtype=a.dtype, batch_size=a.batch_size,
            hf_token=a.hf_token, max_model_len=a.max_model_len, eot_token=a.eot_token,
            tensor_parallel_size=a.tensor_parallel_size, pipeline_parallel_size=a.pipeline_parallel_size,
            distributed_executor_backend=a.distributed_executor_backend,
            gpu_memory_utilization=a.gpu_memory_utilization, enforce_eager=a.enforce_eager,
            rope_scaling=a.rope_scaling, seed=a.seed, verbose=a.verbose)

    def resolve_max_examples(self) -> int:
        """--max_context_examples, or as many as fit the model window (cached per model and task)."""
        a = self.args
        if a.max_context_examples is not None:
            return a.max_context_examples
        path = max_context_path(a.output_dir, a.model_name, a.task_name)
        window = self.backend.max_model_len
        cached = read_json(path) if path.is_file() else None
        if cached and cached.get("max_window_tokens") == window:
            fit = cached["max_context_examples"]
        else:
            from .maxlen import find_max_examples

            log.info("finding how many episodes fit %d tokens (cached in %s)", window, path)
            fit = find_max_examples(self.backend.chat, self.task, window)
            write_json_atomic(path, {"max_context_examples": fit, "max_window_tokens": window})
        fit -= len(self.exemplars)
        if fit < 1:
            raise UsageError(f"no room for context episodes: {len(self.exemplars)} exemplars already fill "
                             f"the window; lower --exemplars_per_label")
        return fit

    def config_record(self) -> dict:
        a, task = self.args, self.task
        args = {k: v for k, v in sorted(vars(a).items()) if k != "hf_token"}
        return {
            "format_version": 1, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "args": json.loads(json.dumps(identity(a))), "runtime_args": {k: args[k] for k in RUNTIME_ARGS if k in args},
            "resolved": {"mode": self.mode, "max_context_examples": self.max_examples, "steps": self.steps,
                         "test_steps": self.test_steps, "num_exemplars": len(self.exemplars)},
            "backend": self.backend.describe(), "environment": environment(),
            "dataset": {"task": task.name, "fingerprint": task.fingerprint(), "labels": task.labels,
                        "num_train": task.num_train, "num_test": task.num_test},
            "train_example_ids": [e.id for e in self.train[:self.steps]] if self.mode != "zero_shot" else [],
            "test_set": {"ids": [e.id for e in self.test], "prompts": [task.prompt(e) for e in self.test],
                         "answers": [task.answer(e) for e in self.test]},
            "exemplars": [{"id": e.id, "prompt": task.prompt(e), "answer": task.answer(e)} for e in self.exemplars],
        }

    def _check_same_plan(self, old: dict) -> None:
        """A resumed run must continue the plan it started with (e.g. the same context size
        when --max_context_examples is found from the window)."""
        new = {"mode": self.mode, "max_context_examples": self.max_examples, "steps": self.steps,
               "test_steps": self.test_steps}
        differing = [k for k in new if old.get(k) != new[k]]
        if differing:
            details = "; ".join(f"{k}: {old.get(k)!r} there, {new[k]!r} now" for k in differing)
            raise UsageError(f"{self.out_dir} was started with another plan ({details}); "
                             f"pass --overwrite to start again")

    # -- model calls ---------------------------------------------------------------------------
    def predict(self, rendered: list[str], seed: int) -> list[str]:
        out = self.backend.predict(rendered, self.task.labels, self.args.temperature, seed)
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
        a, task = self.args, self.task
        if self.check_existing():
            print(f"already finished: {self.out_dir}")
            return self.records.results()
        self.load_data()
        wandb = _wandb_module() if a.wandb else None
        self.load_backend()
        self.max_examples = self.resolve_max_examples()
        self.mode = mode_of(a.icrl, self.max_examples)
        self.steps, self.test_steps = plan_steps(self.mode, len(self.train), a.test_every, self.max_examples)
        self.exemplar_pairs = [(task.prompt(e), task.answer(e)) for e in self.exemplars]
        strategy = make_strategy(a.context_strategy_name, self.max_examples, a.context_p_keep,
                                 a.max_contexts, a.approximate_context_sampling_method)

        resuming = self.records.exists and not a.overwrite
        if resuming:
            self._check_same_plan(self.records.config().get("resolved", {}))
        else:
            self.records.create(self.config_record())
        handler = _attach_log_file(self.out_dir)
        try:
            log.info("arguments: %s", json.dumps(identity(a)))
            log.info("mode %s, %d context episodes, %d steps, test steps %s",
                     self.mode, self.max_examples, self.steps, self.test_steps)
            train_recs, test_recs = self.records.load_for_resume(has_training=self.mode != "zero_shot")
            history = [Episode(r["prompt"], r["prediction"], r["feedback"], r["answer"], r["accuracy"]) for r in train_recs]
            for r, example in zip(train_recs, self.train):
                if r["example_id"] != example.id:
                    raise UsageError(f"{self.out_dir}: step {r['step']} used example {r['example_id']}, the data "
                                     f"now gives {example.id}; the dataset changed, pass --overwrite")
            if self.mode != "zero_shot":
                replay(strategy, history, a.seed)
            start = len(train_recs) if self.mode != "zero_shot" else len(test_recs)
            if resuming:
                log.info("resuming %s at step %d of %d", self.out_dir, start, self.steps)
            run_wandb = wandb.init(project="icrl", dir=str(self.out_dir), config=identity(a),
                                   name=str(self.out_dir.relative_to(a.output_dir))) if wandb else None
            self._loop(strategy, history, train_recs, test_recs, start, run_wandb)
            summary = summarize(train_recs, test_recs, self.steps, self.mode)
            self.records.write_results(summary)
            if run_wandb:
                run_wandb.summary.update({k: v for k, v in summary.items() if not isinstance(v, dict)})
                run_wandb.finish()
            return summary
        finally:
            logging.getLogger("icrl").removeHandler(handler)
            handler.close()

    def _loop(self, strategy, history, train_recs, test_recs, start, run_wandb):
        a, task = self.args, self.task
        index_of = {id(e): i for i, e in enumerate(history)}
        test_prompts = [task.prompt(e) for e in self.test]
        test_answers = [task.answer(e) for e in self.test]
        tests = set(self.test_steps)
        bar = _progress(self.steps, start, a.progress, f"{task.name} {a.context_strategy_name}")
        for t in range(start, self.steps):
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
                test_tic = time.perf_counter()
                predictions = self.predict([self.render(context, p) for p in test_prompts], a.seed + t)
                correct = [int(p == g) for p, g in zip(predictions, test_answers)]
                record = {"step": t, "accuracy": sum(correct) / len(correct),
                          "per_class_accuracy": per_class_accuracy(test_answers, correct),
                          "predictions": predictions, "context_size": len(context), "context": context_ids,
                          "metrics": metrics, "time_s": time.perf_counter() - test_tic}
                self.records.append_test(record)
                test_recs.append(record)
                log.info("step %d: test accuracy %.4f", t, record["accuracy"])
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
            if t in tests:
                self.records.write_results(summarize(train_recs, test_recs, self.steps, self.mode))
            bar.update(1)
            bar.set_postfix(_postfix(train_recs, test_recs), refresh=False)
        bar.close()


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
    handler = logging.FileHandler(directory / "log.txt", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    root = logging.getLogger("icrl")
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    return handler


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of run_experiment.py: exit 0 on success, 2 on bad input."""
    from .cli import parse_args

    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        _console_logging(args.verbose)
        if args.demo:
            print("no arguments: running the embedded demo (SmolLM2-135M on trec_coarse, explorative ICRL)")
        experiment = Experiment(args)
        summary = experiment.run()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    acc = summary.get("final_test_accuracy")
    print(f"results: {experiment.out_dir}")
    print(f"final test accuracy {acc:.4f}" if isinstance(acc, float) and not math.isnan(acc) else "no test accuracy",
          f"| regret {summary['regret']}" if summary.get("regret") is not None else "")
    return 0


def _console_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    logger = logging.getLogger("icrl")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
