"""One online ICRL experiment (published protocol): the orchestration of icrl/run/.

Claim the run directory; decide from the records alone whether the run is new, resumed,
extended or finished; load the data and the backend; plan; write (or check) the config
record; run the loop with its observers; write the results. The steps themselves are
``icrl.run.loop``; run_experiment.py's command line is ``icrl.cli.run``.
"""

from __future__ import annotations

import json
import logging
from typing import Optional, Sequence

from ..method.agents import is_learner, make_policy
from ..config import RunConfig
from ..records import verify
from ..errors import UsageError
from ..method.exploration import strategy_of_run
from ..records import RunRecords, experiment_dir, inspect_run
from ..method.rewards import Reward, reward_of_run
from .data import check_same_data, load_data
from .directory import RunDirectory
from .environment import attach_log_file, detach_log_file, load_backend_of, say
from .loop import Loop
from .observers import LogFailure, Observer, ProgressBar, Wandb
from .plan import Plan
from .rebuild import Checked, check_config, check_records
from .resume import Decision, check_same_plan, config_record, decide, extend
from ..infra.signals import Interrupted, ignore_signals, restore
from .size import check_window, resolve_max_examples

log = logging.getLogger("icrl")


class Experiment:
    """One run. ``backend``: an already loaded backend (a sweep shares one); ``observers``: more
    subscribers to the loop (a sweep's test lines); ``reward``: the reward function (default:
    exact match with the configuration's feedback flipping); ``notes``: lines said once the run
    goes on (not before a refusal, which stays one line), and written to its log."""

    def __init__(self, config: RunConfig, backend=None, observers: Sequence[Observer] = (),
                 reward: Optional[Reward] = None, notes: Sequence[str] = ()):
        s = config.spec
        self.config, self.backend, self.observers = config, backend, list(observers)
        self.notes = list(notes)  # said once the run goes on, and logged (e.g. the settings it ignores)
        self.reward = reward or reward_of_run(s)
        self.out_dir = experiment_dir(config.options.output_dir, s.as_record())
        self.records = RunRecords(self.out_dir)
        self.directory = RunDirectory(self.records, config.options.output_dir)
        self.plan: Optional[Plan] = None
        self.loop: Optional[Loop] = None
        self._steps_done = 0
        self.others: dict = {}  # other models by name (other_model)

    @property
    def steps(self) -> Optional[int]:
        return self.plan.steps if self.plan is not None else None

    @property
    def steps_done(self) -> int:
        return self.loop.steps_done if self.loop is not None else self._steps_done

    def load_backend(self) -> None:
        """The run's model, unless given (a sweep's shared backend); a learner has none."""
        if self.backend is None:
            self.backend = load_backend_of(self.config)

    def other_model(self, name: Optional[str]):
        """Another model the run calls (a judge, a reflection's writer), loaded with the run's
        backend and its options, once per name; None for no name."""
        if not name:
            return None
        if name not in self.others:
            self.others[name] = load_backend_of(self.config.replace(model_name=name, agent="llm"))
        return self.others[name]

    def run(self) -> dict:
        self.directory.claim()
        try:
            return self._run()
        finally:
            self.directory.release()
            for other in self.others.values():
                close = getattr(other, "close", None)
                if close is not None:
                    close()
            self.others.clear()

    def _run(self) -> dict:
        cfg, s, out = self.config, self.config.spec, self.out_dir
        decision = decide(cfg, out, self.records)
        self._steps_done = decision.steps_done
        data = None
        if decision.kind == "finished":
            try:
                data = load_data(cfg, say_warnings=False)
            except UsageError:  # the data cannot be loaded: reported from its records alone
                return self._report_finished(decision.state)
        data = data or load_data(cfg, say_warnings=False)
        self.notes = data.warnings + self.notes  # said once the run goes on
        self.reward.bind(data.task)  # a reward the task cannot have: one line, before any model loads
        checked = Checked([], [])
        if decision.kind != "new":  # every check that needs no model, before it loads; nothing written yet
            check_same_data(out, decision.config, data)
            verify.check_labels(decision.config, data.task.labels, out)
            checked = check_records(cfg, out, data, check_config(out, decision.config, cfg, data), self.reward)
            if decision.kind == "finished":
                if not (checked.repairs or checked.rewrite_train or checked.rewrite_test):
                    return self._report_finished(decision.state)
                decision = Decision("resume", decision.config, None, decision.steps_done)
        observers = [Wandb(s.as_record(), out, str(out.relative_to(cfg.options.output_dir)))] if cfg.options.wandb else []
        what = s.agent if is_learner(s.agent) else s.context_strategy_name or "zero-shot"
        observers += [ProgressBar(cfg.options.progress, f"{data.task.name} {what}"),
                      *self.observers]
        learner = is_learner(s.agent)  # icrl.method.agents: no context, no model
        if learner:
            self.backend = None
        else:
            if self.backend is None:
                check_window(cfg, data)  # a window too small for any prompt: said before the model loads
            self.load_backend()
        # other models a run may call: a judge (--judge_model) and a reflection's writer (--reflection_model)
        reflector = self.other_model(getattr(s, "reflection_model", None)) or self.backend
        if self.reward.needs_model:
            self.reward.attach(self.other_model(getattr(s, "judge_model", None)) or self.backend)
        size = None if learner else resolve_max_examples(cfg, data, self.backend)
        plan = Plan.of(s.icrl, size, len(data.train), s.test_every)
        strategy = None if plan.mode == "zero_shot" or learner else strategy_of_run(s, plan.max_examples)
        recorded = decision.config
        if decision.kind == "extend":
            recorded, plan = extend(cfg, out, self.records, recorded, plan, data)
        elif decision.kind == "resume":
            plan = check_same_plan(out, recorded, plan)
        else:
            backend = self.backend.describe() if self.backend is not None else {"name": "none"}
            self.records.create(config_record(cfg, plan, data, backend))
            recorded = self.records.config()
        self.plan = plan
        handler = attach_log_file(out)
        try:
            log.info("arguments: %s", json.dumps(s.as_record()))
            for note in self.notes:
                say(note)
            log.info("mode %s, %s context episodes, %d steps, test steps %s",
                     plan.mode, plan.max_examples, plan.steps, list(plan.test_steps))
            policy = make_policy(s, data, backend=self.backend, strategy=strategy, mode=plan.mode,
                                 debug_k=cfg.options.debug_k)
            if not learner:
                policy.reflector = reflector
            self.loop = Loop(cfg, data, plan, policy, self.reward, self.records, [LogFailure(handler), *observers],
                             check_directory=self.directory.lock.check)
            self.loop.run(self.loop.restore(checked, out, decision.resuming))
            summary = self.records.refresh_results(self.loop.train_recs, self.loop.test_recs, plan.steps, plan.mode)
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
        """A finished run, checked (against its data when it loads): results.json rewritten if
        missing, unreadable or stale (it is a function of the records)."""
        resolved = state.config["resolved"]
        summary = self.records.refresh_results(state.train, state.test, resolved["steps"], resolved["mode"])
        for note in self.notes:
            say(note)
        print(f"already finished: {self.out_dir}")
        return summary

    def _save_progress(self) -> None:
        """results.json from what is on disk (called when interrupted)."""
        state = inspect_run(self.out_dir)
        self.loop, self._steps_done = None, state.steps_done
        if state.config is not None:
            resolved = state.config["resolved"]
            self.records.refresh_results(state.train, state.test, resolved["steps"], resolved["mode"])
        log.info("interrupted at step %d", self._steps_done)
