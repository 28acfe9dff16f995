"""Whether a run is new, resumed, extended or finished, decided from its records alone (no
data, no model), and its config.json: written for a new run, checked on resume, grown on
extension."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from ..config import ADDED_DEFAULTS, EXTENDING_NAMES, RUNTIME_NAMES, RunConfig
from ..method.shape import RunShape
from ..method.strategies.base import unread_settings
from ..errors import UsageError
from ..infra.masking import scrub
from ..records import RunLog, RunRecords, read_log, write_json_atomic
from ..records.configfile import ConfigFile
from .data import RunData
from .environment import environment, tell
from . import plugins
from ..records.plan import Plan, plan_steps


@dataclass
class RunDecision:
    """``kind``: new, resume, extend or finished. ``log``: the run's log as read (``read_log``;
    not for new runs); ``steps``: an extension's steps."""

    kind: str
    log: Optional[RunLog] = None
    steps_done: int = 0
    steps: Optional[int] = None

    @property
    def resuming(self) -> bool:
        return self.kind in ("resume", "extend")

    def recorded(self) -> RunLog:
        """The log of a run that goes on or is finished (``decide`` reads it for every run that
        is not new)."""
        if self.log is None:
            raise ValueError(f"a {self.kind} run decision without its log")
        return self.log

    def config(self) -> ConfigFile:
        """The recorded config.json of a run that goes on or is finished."""
        return self.recorded().checked_config()


def decide(config: RunConfig, out_dir: Path, records: RunRecords) -> RunDecision:
    """New, resumed, extended, finished, or refused (UsageError) from the records alone."""
    if not records.has_steps():
        return RunDecision("new")  # no completed step: not a run; (re)start it with these arguments
    overwrite = config.options.overwrite
    log = read_log(out_dir)
    if log.refusal is not None and overwrite:  # config.json missing, unreadable or damaged
        return RunDecision("new")
    recorded = log.checked_config()  # DamagedRecords as every reader says it
    old = {**ADDED_DEFAULTS, **recorded.args}  # records written before an argument existed
    new = {**ADDED_DEFAULTS, **config.spec.as_record()}  # an optional field at its default is not written
    # train_k is compared through the plan below: a larger one extends the run
    unread = set(unread_settings(RunShape.of_args(old))) & set(unread_settings(RunShape.of_args(new)))  # either way
    differing = sorted(k for k in set(old) | set(new) if k not in RUNTIME_NAMES and k not in EXTENDING_NAMES
                       and k not in unread and old.get(k) != new.get(k))
    if overwrite and (differing or not recorded.runtime_args.get("overwrite")):
        return RunDecision("new")  # replace it (a run that --overwrite itself started is resumed instead)
    plugins.check_loaded(recorded, out_dir)  # made with a plugin: it is loaded, unchanged
    if differing:
        details = "; ".join(f"--{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in differing)
        raise UsageError(f"{out_dir} holds a run with other arguments ({details}); "
                         f"pass --overwrite to replace it")
    steps = extension_of(config, out_dir, recorded)
    if log.finished and steps is None:  # its content is checked once the data is loaded (icrl.run.rebuild)
        return RunDecision("finished", log, log.steps_done)
    return RunDecision("resume" if steps is None else "extend", log, log.steps_done, steps)


def extension_of(config: RunConfig, out_dir: Path, recorded: ConfigFile) -> Optional[int]:
    """The number of steps this --train_k asks of a recorded run, when more than it has
    (an extension), else None; fewer is a one-line error. Computed from config.json alone
    (training pool size, resolved context size), so before any data or model loads."""
    s, resolved = config.spec, recorded.resolved
    before_steps, before = resolved.steps, recorded.spec.train_k
    pool = recorded.dataset.num_train - resolved.num_exemplars
    num_train = pool if s.train_k == -1 else min(s.train_k, pool)
    steps, _ = plan_steps(resolved.mode, num_train, s.test_every, resolved.max_context_examples)
    if steps == before_steps or s.train_k == before:
        return None  # the same --train_k: its plan is checked against the data (icrl.run.rebuild.check_config)
    if steps < before_steps:
        raise UsageError(f"{out_dir} holds a run of {before_steps} steps (--train_k {before}); "
                         f"--train_k {s.train_k} gives {steps}: pass --train_k {before} to resume or "
                         f"report it, a larger one to extend it, or --overwrite to replace it")
    return steps


def config_record(config: RunConfig, plan: Plan, data: RunData, backend: dict[str, Any]) -> dict[str, Any]:
    """config.json of a new run (``backend``: what its backend says of itself, ``describe()``)."""
    task = data.task
    return scrub({
        "format_version": 1, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "args": config.spec.as_record(), "runtime_args": config.runtime_record(),
        "resolved": {"mode": plan.mode, "max_context_examples": plan.max_examples, "steps": plan.steps,
                     "test_steps": list(plan.test_steps), "num_exemplars": len(data.exemplars),
                     "train_examples": len(data.train), "test_examples": len(data.test)},
        "backend": backend, "environment": environment(), **plugins.record(config),
        **data.record(),
        "train_example_ids": [e.id for e in data.train[:plan.steps]] if plan.mode != "zero_shot" else [],
        "exemplars": [{"id": e.id, "prompt": task.prompt(e), "answer": task.answer(e)} for e in data.exemplars],
    })


def extend(config: RunConfig, out_dir: Path, records: RunRecords, log: RunLog, plan: Plan,
           data: RunData) -> Plan:
    """Continue a recorded run to more steps: the same training stream, so its records stay;
    config.json gets the longer plan and an ``extended`` entry (from, to steps). The shorter
    run's last test step stays a test step. Returns the new plan."""
    recorded = log.checked_config()
    train_k, old = config.spec.train_k, recorded.resolved
    before = old.steps
    if (old.mode, old.max_context_examples) != (plan.mode, plan.max_examples):
        raise UsageError(f"{out_dir} was started with another plan (mode {old.mode!r}, "
                         f"{old.max_context_examples!r} context examples there; {plan.mode!r}, "
                         f"{plan.max_examples!r} now); pass --overwrite to start again")
    ids = [e.id for e in data.train[:plan.steps]]
    if ids[:before] != recorded.train_example_ids:
        raise UsageError(f"{out_dir}: the training examples of its {before} steps are not the first "
                         f"{before} of --train_k {train_k}; pass --overwrite to start again")
    plan = plan.with_tests(old.test_steps)
    grown = json.loads(json.dumps(log.config_json))
    grown["extended"] = grown.get("extended", []) + [{
        "from": before, "to": plan.steps, "train_k_before": recorded.spec.train_k,
        "train_k": train_k, "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}]
    grown["args"]["train_k"] = train_k
    grown["resolved"].update(steps=plan.steps, test_steps=list(plan.test_steps), train_examples=len(data.train))
    grown["train_example_ids"] = ids
    write_json_atomic(out_dir / "config.json", grown)
    records.refresh_results_from_disk()
    tell(f"extending {out_dir} from {before} to {plan.steps} steps (--train_k {train_k})")
    return plan


def check_same_plan(out_dir: Path, recorded: ConfigFile, plan: Plan) -> Plan:
    """A resumed run must continue the plan it started with (e.g. the same context size
    when --max_context_examples is found from the window); the last steps of the shorter
    runs an extended run grew from stay test steps. Returns the plan with those test steps."""
    old = recorded.resolved
    plan = plan.with_tests(t for t in (e.start - 1 for e in recorded.extended) if 0 <= t < plan.steps)
    there = {"mode": old.mode, "max_context_examples": old.max_context_examples, "steps": old.steps,
             "test_steps": old.test_steps}
    new = {"mode": plan.mode, "max_context_examples": plan.max_examples, "steps": plan.steps,
           "test_steps": list(plan.test_steps)}
    differing = [k for k in new if there[k] != new[k]]
    if differing:
        details = "; ".join(f"{k}: {there[k]!r} there, {new[k]!r} now" for k in differing)
        raise UsageError(f"{out_dir} was started with another plan ({details}); "
                         f"pass --overwrite to start again")
    return plan
