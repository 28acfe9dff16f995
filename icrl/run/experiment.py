"""One online ICRL experiment (published protocol): the orchestration of icrl/run/.

Claim the run directory; decide from the records alone whether the run is new, resumed,
extended or finished; load the data and the backend; plan; write (or check) the config
record; run the loop with its observers; write the results. The steps themselves are
``icrl.run.loop``; run_experiment.py's command line is ``icrl.cli.run``.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Optional, Sequence

from ..backends import Backend
from ..method.agents import is_learner
from ..method.calls import Models
from ..config import RunConfig
from ..errors import UsageError
from ..records import RunLog, RunRecords, experiment_dir, read_log
from ..records.log import record_problems
from ..method.rewards import Reward
from .data import RunData, check_same_data, load_data
from .directory import RunDirectory
from .environment import attach_log_file, detach_log_file, load_backend_of, tell
from .assemble import assemble, build_reward, by_option, calls_of, plan_of
from .loop import Loop
from .observers import LogFailure, Observer, ProgressBar, Wandb
from ..records.plan import Plan
from .rebuild import Checked, check_config, check_records
from .resume import RunDecision, check_same_plan, config_record, decide, extend
from ..infra.signals import Interrupted, ignore_signals, restore
from .budgets import check_budgets
from .size import check_window, resolve_max_examples

log = logging.getLogger("icrl")


class Experiment:
    """One run. ``backend``: an already loaded backend (a sweep shares one); ``observers``: more
    subscribers to the loop (a sweep's test lines); ``reward``: the reward function (default:
    exact match with the configuration's feedback flipping); ``notes``: lines said once the run
    goes on (not before a refusal, which stays one line), and written to its log."""

    def __init__(self, config: RunConfig, backend: Any = None, observers: Sequence[Observer] = (),
                 reward: Optional[Reward] = None, notes: Sequence[str] = ()) -> None:
        s = config.spec
        self.config, self.backend, self.observers = config, backend, list(observers)
        self.notes = list(notes)  # said once the run goes on, and logged (e.g. the settings it ignores)
        self.reward = build_reward(config, reward)  # a plugin's: checked at its edge (icrl.run.edge)
        self.out_dir = experiment_dir(config.options.output_dir, s.as_record())
        self.records = RunRecords(self.out_dir)
        self.directory = RunDirectory(self.records, config.options.output_dir)
        self.plan: Optional[Plan] = None
        self.loop: Optional[Loop] = None
        self._steps_done = 0
        self.others: dict[str, Optional[Backend]] = {}  # other models by name (other_model)

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

    def other_model(self, name: Optional[str]) -> Optional[Backend]:
        """Another model the run calls (named by a declared call's option), loaded with the run's
        backend and its options, once per name; None for no name."""
        if not name:
            return None
        if name not in self.others:
            self.others[name] = load_backend_of(self.config.replace(model_name=name, agent="llm"))
        return self.others[name]

    def run(self) -> dict[str, Any]:
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

    def _run(self) -> dict[str, Any]:
        cfg, out = self.config, self.out_dir
        decision = decide(cfg, out, self.records)
        self._steps_done = decision.steps_done
        data = self._data(decision)
        if data is None:  # finished, and its data cannot be loaded: reported from its records alone
            return self._report_finished(decision.recorded())
        self.notes = data.warnings + self.notes  # said once the run goes on
        self.reward.bind(data.task)  # a reward the task cannot have: one line, before any model loads
        checked = Checked([], [])
        if decision.kind != "new":  # every check that needs no model, before it loads; nothing written yet
            checked = self._check(decision, data)
            if decision.kind == "finished":
                if not checked.changed:
                    return self._report_finished(decision.recorded(), checked)
                decision = RunDecision("resume", decision.log, decision.steps_done)
        observers = self._observers(data)
        models = self._load_models(data)
        plan = self._plan(decision, data)
        handler = attach_log_file(out)
        try:
            self._say_start(plan)
            parts = assemble(cfg, data, plan, models, self.records, reward=self.reward,
                             observers=[LogFailure(handler), *observers], check_directory=self.directory.lock.check,
                             debug_k=cfg.options.debug_k)
            self.loop = parts.loop
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

    def _data(self, decision: RunDecision) -> Optional[RunData]:
        """The run's data; None for a finished run whose data cannot be loaded and whose records
        are sound as far as config.json can tell (reported from its records alone)."""
        try:
            return load_data(self.config, say_warnings=False)
        except UsageError:
            if decision.kind == "finished" and not self._records_problems(decision.recorded()):
                return None
            raise

    @staticmethod
    def _records_problems(log: RunLog) -> list[str]:
        """What config.json alone shows wrong in a finished run's lines (no data to check them with)."""
        train, test, found = log.typed()
        return found + record_problems(log.checked_config(), train, test)

    def _check(self, decision: RunDecision, data: RunData) -> Checked:
        """The records of a run that goes on (or is finished), checked against the data and the
        arguments; DamagedRecords (one line) for what cannot be repaired."""
        log = decision.recorded()
        check_same_data(self.out_dir, log.checked_config(), data)
        return check_records(log, self.config, data, check_config(log, data), self.reward)

    def _observers(self, data: RunData) -> list[Observer]:
        cfg, s, out = self.config, self.config.spec, self.out_dir
        observers = [Wandb(s.as_record(), out, str(out.relative_to(cfg.options.output_dir)))] if cfg.options.wandb else []
        what = s.agent if is_learner(s.agent) else s.context_strategy_name or "zero-shot"
        return [*observers, ProgressBar(cfg.options.progress, f"{data.task.name} {what}"), *self.observers]

    def _load_models(self, data: RunData) -> Models:
        """The models of the run's calls (``icrl.run.assemble.by_option``), loaded now: the acting
        model (a learner has none), then the other models its parts' calls name."""
        cfg, s = self.config, self.config.spec
        if self.backend is None and not is_learner(s.agent):  # from the tokenizer, before the model loads
            check_window(cfg, data)  # a window too small for any prompt
        check_budgets(cfg, data)  # a token budget too large for its model's window (a sweep's runs too)
        if is_learner(s.agent):  # icrl.method.agents: no context, no model
            self.backend = None
        else:
            self.load_backend()
        models = by_option(cfg, self.backend, self.other_model)
        for call in calls_of(cfg):  # the models its strategy's and reward's calls name, in that order
            models(call)
        return models

    def _plan(self, decision: RunDecision, data: RunData) -> Plan:
        """The run's plan: a new run's config.json written, a resumed one's checked, an extended
        one's grown."""
        cfg, s = self.config, self.config.spec
        size = None if is_learner(s.agent) else resolve_max_examples(cfg, data, self.backend)
        plan = plan_of(cfg, data, size)
        if decision.kind == "extend":
            plan = extend(cfg, self.out_dir, self.records, decision.recorded(), plan, data)
        elif decision.kind == "resume":
            plan = check_same_plan(self.out_dir, decision.config(), plan)
        else:
            backend = self.backend.describe() if self.backend is not None else {"name": "none"}
            self.records.create(config_record(cfg, plan, data, backend))
        self.plan = plan
        return plan

    def _say_start(self, plan: Plan) -> None:
        log.info("arguments: %s", json.dumps(self.config.spec.as_record()))
        for note in self.notes:
            tell(note)
        log.info("mode %s, %s context episodes, %d steps, test steps %s",
                 plan.mode, plan.max_examples, plan.steps, list(plan.test_steps))

    def _report_finished(self, log: RunLog, checked: Optional[Checked] = None) -> dict[str, Any]:
        """A finished run, checked (against its data when it loads: ``checked``): results.json
        rewritten if missing, unreadable or stale (it is a function of the records)."""
        resolved = log.checked_config().resolved
        train, test = (checked.train, checked.test) if checked is not None else log.typed()[:2]
        summary = self.records.refresh_results(train, test, resolved.steps, resolved.mode)
        for note in self.notes:
            tell(note)
        print(f"already finished: {self.out_dir}")
        return summary

    def _save_progress(self) -> None:
        """results.json from what is on disk (called when interrupted)."""
        self.loop, self._steps_done = None, read_log(self.out_dir).steps_done
        self.records.refresh_results_from_disk()
        log.info("interrupted at step %d", self._steps_done)
