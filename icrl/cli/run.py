"""run_experiment.py's command line: flags -> RunConfig, in one place, and ``main``.

Each flag's help text, default, type, choices and role live on its configuration field
(icrl/config.py); this module says only in which --help group each flag shows, in which order.
``parse_args`` builds the frozen RunConfig with resolved values, then ``validate`` checks it
(pure; nothing loads, nothing is written).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from typing import Any, Callable, Optional, Sequence, Union

from ..backends import backend_class, backends_taking
from ..backends.embedded import DEFAULT_MODEL
from ..config import FIELDS, RunConfig, flag_of
from .flags import choices_of, default_of, help_of, is_switch, kind_of
from ..errors import ServiceFailure, UsageError
from ..infra import plugins
from ..infra.diskfull import os_error_line
from ..infra.masking import register_args, scrub
from ..infra.signals import Interrupted, check, ignore_signals, interrupted_by_term, restore, say, stop_in
from ..method import declared_params
from ..method.agents import is_learner
from ..method.strategies import STRATEGIES
from ..run.environment import console_logging
from ..run import plugins as run_plugins
from ..run.edge import PluginBreach
from ..run.experiment import Experiment
from .parser import ArgumentParser, add_plugin_flag
from .validate import check_flags, ignored_settings, validate

# With no arguments at all, run_experiment.py runs this: SmolLM2 learning from its rewards with a
# retrieval context (the 4 rewarded episodes most similar to the input) on banking77's 10 most
# frequent intents, sized to finish in a few minutes on 2 CPU cores (README: What the demo shows).
DEMO_ARGS = [
    "--model_name", DEFAULT_MODEL, "--task_name", "banking77_top10",
    "--context_strategy_name", "knn_embedding_only_positive",
    "--temperature", "1.0", "--max_context_examples", "4", "--icrl",
    "--train_k", "200", "--test_every", "100", "--test_k", "50",
    "--seed", "100", "--training_seed", "100", "--test_seed", "100", "--output_dir", "data/demo",
]


# Where each flag shows in --help, by group: the published script's flags in its order, then ours.
# A flag's type, action and choices are its field's (icrl/config.py: ``kind_of``, ``choices_of``,
# ``is_switch``); the declared parameters (icrl.method) join their own groups after these.
PUBLISHED_FLAGS = (
    "model_name", "task_name", "context_strategy_name", "temperature", "context_p_keep", "max_context_examples",
    "icrl", "icrl_omit_feedback", "icrl_flip_feedback", "icrl_flip_feedback_prob", "max_contexts",
    "approximate_context_sampling_method", "train_k", "test_every", "test_k", "exemplars_per_label", "debug_k",
    "seed", "training_seed", "test_seed", "hf_token", "verbose")
RUN_FLAGS = ("backend", "data_dir", "output_dir", "overwrite", "batch_size", "device", "dtype", "eot_token",
             "max_model_len", "published_tokenization", "progress", "wandb")
VLLM_FLAGS = ("tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend",
              "gpu_memory_utilization", "enforce_eager")
LATE_RUN_FLAGS = ("rope_scaling",)  # shown last in the run's group (it came after the vLLM options)
API_FLAGS = ("base_url", "api_key", "api_model", "api_mode", "max_concurrency", "timeout", "max_retries",
             "first_answer_timeout")


def _how(name: str) -> dict[str, Any]:
    """How field ``name``'s flag is spelled: from its type, choices and role (icrl/config.py)."""
    kind = kind_of(name)
    if kind is bool:
        return {"action": "store_true" if is_switch(name) else argparse.BooleanOptionalAction}
    choices = choices_of(name)
    return {**({} if kind is str else {"type": kind}), **({"choices": choices} if choices else {})}


def _adder(group: argparse._ActionsContainer) -> Callable[[str], None]:
    """``add(name)``: the flag of field ``name`` with its default, help, type and choices; a field
    spelled otherwise first (``flag_of``) keeps ``--name`` as an old spelling."""
    def add(name: str) -> None:
        spellings = dict.fromkeys([flag_of(name), f"--{name}"])
        group.add_argument(*spellings, dest=name, default=default_of(name), help=help_of(name), **_how(name))
    return add


def _declared_groups() -> dict[Union[str, tuple[str, ...]], list[str]]:
    """The declared parameters' names by --help group: "beyond" (exploration, rewards), "agent",
    then one group per owner set (the base names of the strategies that declare them) for the
    strategies' own."""
    groups: dict[Union[str, tuple[str, ...]], list[str]] = {"beyond": [], "agent": []}
    for d in declared_params():
        if d.group == "agent":
            groups["agent"].append(d.param.name)
        elif d.group == "strategy":
            groups.setdefault(tuple(d.owners), []).append(d.param.name)
        else:
            groups["beyond"].append(d.param.name)
    return groups


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="run_experiment.py",
        description="Run one online ICRL (or ICL / zero-shot) experiment. With no arguments: the embedded demo.")
    declared = _declared_groups()
    laid_out = {*PUBLISHED_FLAGS, *RUN_FLAGS, *VLLM_FLAGS, *LATE_RUN_FLAGS, *API_FLAGS}
    unplaced = set(FIELDS) - laid_out - {name for names in declared.values() for name in names}
    if unplaced:  # a new field of icrl/config.py: give it a place in --help above
        raise AssertionError(f"configuration fields without a flag: {', '.join(sorted(unplaced))}")
    published = _adder(p.add_argument_group("published flags (same names and meaning as the paper's script)"))
    for name in PUBLISHED_FLAGS:
        published(name)
    beyond = _adder(p.add_argument_group(
        "beyond the paper (our definitions, off by default: docs/method.md; the published script parses the first "
        "three and ignores them)"))
    for name in declared.pop("beyond"):
        beyond(name)
    _engine_flags(p)
    agents = _adder(p.add_argument_group("agents that are not LLMs (docs/method.md, \"Beyond the paper\")"))
    for name in declared.pop("agent"):
        agents(name)
    for owners, names in declared.items():  # the strategies' own parameters, a group per strategy (or strategies)
        heading = f"{', '.join(owners)} (--context_strategy_name {' or '.join(owners)})"
        if len(owners) == 1 and owners[0] in STRATEGIES:
            heading += f": {STRATEGIES.get(owners[0]).cls.summary}"
        group = _adder(p.add_argument_group(heading))
        for name in names:
            group(name)
    return p


def _engine_flags(p: argparse.ArgumentParser) -> None:
    """Our flags of the run and its backend: where records go, and each backend's options."""
    ours = _adder(p.add_argument_group("icrl options"))
    for name in RUN_FLAGS:
        ours(name)
    add_plugin_flag(p.add_argument_group("plugins"))
    vllm = _adder(p.add_argument_group("vLLM options"))
    for name in VLLM_FLAGS:
        vllm(name)
    for name in LATE_RUN_FLAGS:
        ours(name)
    api = _adder(p.add_argument_group(f"server and API options (--backend {', '.join(backends_taking('base_url'))})"))
    for name in API_FLAGS:
        api(name)


def parse_args(argv: Optional[Sequence[str]], weights: bool = True) -> RunConfig:
    """Parse, resolve and validate; an empty argument list means the demo preset. ``weights=False``:
    the run is only planned (run_sweep.py --estimate): its model needs only a tokenizer."""
    argv = list(argv or [])
    parser = build_parser()
    words = argv if argv else DEMO_ARGS
    values = vars(parser.parse_args(words))
    del values["plugin"]  # loaded before the parser was built (icrl.infra.plugins)
    register_args(values)  # its secrets are masked wherever they would be written or shown
    check_flags(values)
    one_spelling(values)
    spelled = spelled_flags(parser, words)
    ignored = ignored_settings(values, spelled)
    if values["max_context_examples"] == 0:
        values["context_strategy_name"] = None  # zero-shot has no context: any strategy is the same run
    if is_learner(values["agent"]):
        learner_values(values)
    config = RunConfig.from_values(values, demo=not argv)
    validate(config, spelled, weights)
    return dataclasses.replace(config, ignored=ignored)


def one_spelling(values: dict[str, Any]) -> None:
    """Spellings of one computation name one run (its folder and config.json's args): --api_model
    the same as --model_name is no --api_model, and an --api_mode that auto is before the backend
    loads (the backend class's ``auto_mode``: --backend anthropic's chat; openai's chat for a model
    without a tokenizer here) is auto. Runs named without them stay where they are."""
    if values["api_model"] == values["model_name"]:
        values["api_model"] = None
    if values["api_mode"] != "auto" and not is_learner(values["agent"]):  # a backend that takes it (check_flags)
        auto_mode = getattr(backend_class(values["backend"]), "auto_mode", None)
        if auto_mode is not None and auto_mode(values["model_name"]) == values["api_mode"]:
            values["api_mode"] = "auto"


def spelled_flags(parser: argparse.ArgumentParser, words: Sequence[str]) -> dict[str, str]:
    """Field name -> the option string the user typed for it (its last use; an abbreviation is
    taken as typed)."""
    options = {option: action.dest for action in parser._actions for option in action.option_strings}
    spelled: dict[str, str] = {}
    for word in words:
        flag = str(word).split("=", 1)[0]
        if not flag.startswith("--"):
            continue
        matches = {dest for option, dest in options.items() if option == flag} or \
            {dest for option, dest in options.items() if option.startswith(flag)}
        if len(matches) == 1:
            spelled[matches.pop()] = flag
    return spelled


def learner_values(values: dict[str, Any]) -> None:
    """A learner's run (--agent other than llm) has no model and is an ICRL run (rewards)."""
    if values["model_name"] != default_of("model_name"):
        raise UsageError(f"--agent {values['agent']} is a learner, not a model: drop --model_name")
    if values["icrl"] is False:
        raise UsageError(f"--agent {values['agent']} learns online from the stream: drop --no-icrl")
    values["model_name"], values["icrl"] = None, True


def missing_plugins(argv: Sequence[str], error: str) -> str:
    """For a name or flag not known: the plugins runs under --output_dir were made with and that
    are not loaded ("" when none), said after the error (a run resumed without its plugin)."""
    if not (error.startswith("unrecognized arguments") or error.startswith("unknown --")):
        return ""
    words, root = list(argv) or DEMO_ARGS, default_of("output_dir")
    for word, after in zip(words, [*words[1:], None]):  # the last one given, as argparse takes it
        if word.startswith("--output_dir="):
            root = word.split("=", 1)[1]
        elif word == "--output_dir" and after is not None:
            root = after
    missing = run_plugins.missing_under(root)
    return (f"; runs under {root} were made with plugin {', '.join(missing)}, not loaded: give it with --plugin"
            if missing else "")


def _stopped(signum: int, step: int) -> int:
    """A run stopped by signal ``signum``: said in one line; exit 128 + its number."""
    ignore_signals()  # a second signal must not cut the exit short
    # Objects torn down mid-call (an async client whose event loop a signal closed) may
    # complain as they are collected; the process is stopping, the records are saved.
    sys.unraisablehook = lambda unraisable: None
    say(f"interrupted at step {step}; rerun the same command to resume")
    return 128 + int(signum)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of run_experiment.py: exit 0 on success, 2 on bad input, 128 + signal number
    when interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)."""
    from_script, argv = argv is None, sys.argv[1:] if argv is None else argv
    experiment, stopped = None, False
    previous = interrupted_by_term()
    try:
        plugins.load(argv)  # the script loaded them before importing this module; main(argv) alone: here
        config = parse_args(argv)
        console_logging(config.options.verbose)
        if config.demo:
            print("no arguments: running the embedded demo (SmolLM2-135M on banking77_top10, ICRL with a "
                  "retrieval context: the 4 rewarded episodes most similar to each input)")
        # said once the run goes on (a refusal stays one line), and written to its log
        experiment = Experiment(config, notes=[f"warning: {w}" for w in config.ignored])
        check()  # a stop that arrived inside an import
        summary = experiment.run()
    except UsageError as exc:
        steps = experiment.steps_done if experiment is not None else 0
        if isinstance(exc, PluginBreach) and experiment is not None:  # during the run: at which step
            said = exc.line(steps)
        else:  # a service failure says whether a step was saved
            said = (exc.said(steps) if isinstance(exc, ServiceFailure) else str(exc)) + \
                (missing_plugins(argv, str(exc)) if experiment is None else "")
        print(f"error: {scrub(said)}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted, Exception) as exc:
        signum = stop_in(exc)  # a stop inside a class's creation arrives wrapped in a RuntimeError
        if signum is not None:
            stopped = True
            return _stopped(signum, experiment.steps_done if experiment is not None else 0)
        # a plugin's failure, a file a user can fix: one line (else a bug: its traceback)
        line = run_plugins.failure(exc, experiment.steps_done if experiment is not None else 0)
        line = line and f"error: {line}"
        if line is None and isinstance(exc, OSError):
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
