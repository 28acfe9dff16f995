"""One online ICRL experiment (published protocol): the orchestration of icrl/run/.

Claim the run directory; decide from the records alone whether the run is new, resumed,
extended or finished; load the data and the backend; plan; write (or check) the config
record; run the loop with its observers; write the results. The steps themselves are
``icrl.run.loop``; ``main`` is run_experiment.py.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import sys
from typing import Optional, Sequence

from .agents import Agent
from .agents.naming import is_learner
from .config import RunConfig
from .context import make_strategy
from . import verify
from .errors import UsageError
from .exploration import with_ucb
from .masking import scrub
from .records import RunRecords, experiment_dir, inspect_run
from .rewards import Reward, make_reward
from .run.data import check_same_data, load_data
from .run.directory import RunDirectory
from .run.environment import attach_log_file, console_logging, detach_log_file, load_backend_of
from .run.loop import Loop
from .run.observers import Observer, ProgressBar, Wandb
from .run.plan import Plan, plan_steps, summarize  # noqa: F401  (plan_steps: part of this module's API)
from .run.resume import check_same_plan, config_record, decide, extend
from .diskfull import os_error_line
from .run.signals import Interrupted, check, ignore_signals, interrupted_by_term, restore, say
from .run.size import resolve_max_examples

log = logging.getLogger("icrl")


class Experiment:
    """One run. ``backend``: an already loaded backend (a sweep shares one); ``observers``: more
    subscribers to the loop (a sweep's test lines); ``reward``: the reward function (default:
    exact match with the configuration's feedback flipping)."""

    def __init__(self, config: RunConfig, backend=None, observers: Sequence[Observer] = (),
                 reward: Optional[Reward] = None):
        s = config.spec
        self.config, self.backend, self.observers = config, backend, list(observers)
        self.reward = reward or make_reward(s.reward, flip=s.icrl_flip_feedback, flip_prob=s.icrl_flip_feedback_prob)
        self.out_dir = experiment_dir(config.options.output_dir, s.as_record())
        self.records = RunRecords(self.out_dir)
        self.directory = RunDirectory(self.records, config.options.output_dir)
        self.plan: Optional[Plan] = None
        self.loop: Optional[Loop] = None
        self._steps_done = 0

    @property
    def steps(self) -> Optional[int]:
        return self.plan.steps if self.plan is not None else None

    @property
    def steps_done(self) -> int:
        return self.loop.steps_done if self.loop is not None else self._steps_done

    def load_backend(self) -> None:
        if self.backend is None:  # else given (a sweep's shared backend)
            self.backend = load_backend_of(self.config)

    def run(self) -> dict:
        self.directory.claim()
        try:
            return self._run()
        finally:
            self.directory.release()

    def _run(self) -> dict:
        cfg, s, out = self.config, self.config.spec, self.out_dir
        decision = decide(cfg, out, self.records)
        self._steps_done = decision.steps_done
        if decision.kind == "finished":
            return self._report_finished(decision.state)
        data = load_data(cfg)
        self.reward.bind(data.task)  # a reward the task cannot have: one line, before any model loads
        if decision.resuming:
            check_same_data(out, decision.config, data)
            verify.check_labels(decision.config, data.task.labels, out)
        observers = [Wandb(s.as_record(), out, str(out.relative_to(cfg.options.output_dir)))] if cfg.options.wandb else []
        what = s.agent if is_learner(s.agent) else s.context_strategy_name or "zero-shot"
        observers += [ProgressBar(cfg.options.progress, f"{data.task.name} {what}"),
                      *self.observers]
        self.load_backend()
        learner = is_learner(s.agent)  # icrl.agents: no context, no model
        size = None if learner else resolve_max_examples(cfg, data, self.backend)
        plan = Plan.of(s.icrl, size, len(data.train), s.test_every)
        strategy = None if plan.mode == "zero_shot" or learner else with_ucb(make_strategy(
            s.context_strategy_name, plan.max_examples, s.context_p_keep, s.max_contexts,
            s.approximate_context_sampling_method, published_quirks=s.published_tokenization), s.ucb_alpha)
        recorded = decision.config
        if decision.kind == "extend":
            recorded, plan = extend(cfg, out, self.records, recorded, plan, data)
        elif decision.kind == "resume":
            plan = check_same_plan(out, recorded, plan)
        else:
            self.records.create(config_record(cfg, plan, data, self.backend))
            recorded = self.records.config()
        self.plan = plan
        handler = attach_log_file(out)
        try:
            log.info("arguments: %s", json.dumps(s.as_record()))
            log.info("mode %s, %s context episodes, %d steps, test steps %s",
                     plan.mode, plan.max_examples, plan.steps, list(plan.test_steps))
            agent = Agent.of_run(s, data) if learner else None
            self.loop = Loop(cfg, data, plan, self.backend, strategy, self.reward, self.records, observers,
                             check_directory=self.directory.lock.check, agent=agent)
            self.loop.run(self.loop.restore(recorded, out, decision.resuming))
            summary = summarize(self.loop.train_recs, self.loop.test_recs, plan.steps, plan.mode)
            self.records.write_results(summary)
            for observer in observers:
                observer.on_finish(summary)
            return summary
        except (KeyboardInterrupt, Interrupted):
            previous = ignore_signals()
            try:
                self._save_progress()
            finally:
                restore(previous)
            raise
        finally:
            detach_log_file(handler)

    def _report_finished(self, state) -> dict:
        resolved = state.config["resolved"]
        summary = summarize(state.train, state.test, resolved["steps"], resolved["mode"])
        try:
            current = self.records.results()
        except (OSError, ValueError):
            current = None
        if current != summary:  # missing, unreadable or stale: it is a function of the records
            self.records.write_results(summary)
        try:
            data = load_data(self.config)
        except UsageError:
            data = None  # the data cannot be loaded: reported from its records alone
        if data is not None:  # then config.json must match it
            check_same_data(self.out_dir, state.config, data)
            verify.check_labels(state.config, data.task.labels, self.out_dir)
        print(f"already finished: {self.out_dir}")
        return summary

    def _save_progress(self) -> None:
        """results.json from what is on disk (called when interrupted)."""
        state = inspect_run(self.out_dir)
        self.loop, self._steps_done = None, state.steps_done
        if state.config is not None:
            resolved = state.config["resolved"]
            self.records.write_results(summarize(state.train, state.test, resolved["steps"], resolved["mode"]))
        log.info("interrupted at step %d", self._steps_done)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of run_experiment.py: exit 0 on success, 2 on bad input, 128 + signal number
    when interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)."""
    from_script, argv = argv is None, sys.argv[1:] if argv is None else argv
    experiment, stopped = None, False
    previous = interrupted_by_term()
    try:
        from .cli import parse_args  # inside the try: a stop during this import is honoured in one line

        config = parse_args(argv)
        console_logging(config.options.verbose)
        if config.demo:
            print("no arguments: running the embedded demo (SmolLM2-135M on trec_coarse, explorative ICRL)")
        experiment = Experiment(config)
        check()  # a stop that arrived inside an import
        summary = experiment.run()
    except UsageError as exc:
        print(f"error: {scrub(str(exc))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted) as exc:
        ignore_signals()  # a second signal must not cut the exit short
        # Objects torn down mid-call (an async client whose event loop a signal closed) may
        # complain as they are collected; the process is stopping, the records are saved.
        sys.unraisablehook = lambda unraisable: None
        stopped = True
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        step = experiment.steps_done if experiment is not None else 0
        say(f"interrupted at step {step}; rerun the same command to resume")
        return 128 + int(signum)
    except OSError as exc:
        line = os_error_line(exc, "rerun the same command to resume")
        if line is None:
            raise
        print(scrub(line), file=sys.stderr)
        return 2
    finally:
        if not (stopped and from_script):  # the script exits with signals ignored; callers get theirs back
            restore(previous)
    acc = summary.get("final_test_accuracy")
    print(f"results: {experiment.out_dir}")
    print(f"final test accuracy {acc:.4f}" if isinstance(acc, float) and not math.isnan(acc) else "no test accuracy",
          f"| regret {summary['regret']}" if summary.get("regret") is not None else "")
    return 0
