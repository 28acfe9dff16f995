"""The typed run configuration (icrl/config.py) and the command line that builds it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from icrl import config
from icrl.cli import build_parser, flags, parse_args
from icrl.cli.validate import validate
from icrl.config import RunConfig, RunOptions, RunSpec, Secrets
from icrl.errors import UsageError
from icrl.method import declared_params
from icrl.records import experiment_dir

# The parameters the parts of the method declare (exploration, rewards, agents, the strategies'
# own): read from the registries, so that a new part's parameter needs no edit here.
DECLARED = {d.param.name: d.param for d in declared_params()}

BASE = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl",
        "--seed", "1", "--training_seed", "2", "--test_seed", "3", "--max_context_examples", "4"]


def test_the_parser_flags_are_the_configuration_fields():
    parser = build_parser()
    dests = {a.dest for a in parser._actions if a.option_strings and a.dest != "help"}
    assert dests == set(config.FIELDS) | {"plugin"}  # --plugin: read before the parser is built, no field
    for action in parser._actions:
        if action.dest in config.FIELDS:
            assert action.default == flags.default_of(action.dest), action.dest
            assert action.help == flags.help_of(action.dest), action.dest


def test_a_flag_parses_its_fields_type_and_choices():
    parser = build_parser()
    values = vars(parser.parse_args(["--batch_size", "16", "--timeout", "2.5", "--icrl", "--overwrite"]))
    assert values["batch_size"] == 16 and values["timeout"] == 2.5 and values["icrl"] is True
    assert vars(parser.parse_args(["--no-icrl"]))["icrl"] is False  # Optional[bool]: both forms
    for words in (["--batch_size", "many"], ["--no-overwrite"], ["--api_mode", "json"], ["--backend", "tpu"]):
        with pytest.raises(UsageError):  # a switch has no --no- form; a field with choices takes only those
            parser.parse_args(words)
    with pytest.raises(UsageError, match="invalid choice: 'tpu'"):
        parser.parse_args(["--backend", "tpu"])


def test_a_field_without_a_place_in_help_is_refused(monkeypatch):
    import importlib

    run = importlib.import_module("icrl.cli.run")
    monkeypatch.setattr(run, "API_FLAGS", tuple(n for n in run.API_FLAGS if n != "max_retries"))
    with pytest.raises(AssertionError, match="configuration fields without a flag: max_retries"):
        build_parser()


def test_every_field_has_one_part_and_help():
    names = [f.name for part in (RunSpec, RunOptions, Secrets) for f in dataclasses.fields(part)]
    assert len(names) == len(set(names)) == len(config.FIELDS)
    assert all(flags.help_of(n) for n in names)


def test_the_configuration_is_frozen_and_hashable():
    cfg = parse_args(BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.spec.seed = 5  # type: ignore[misc]
    assert hash(cfg) == hash(parse_args(BASE))
    assert cfg.replace(progress=False).options.progress is False and cfg.options.progress is True


def test_config_record_parts_are_sorted_and_hold_no_secret():
    cfg = parse_args(BASE + ["--hf_token", "hf_SECRET", "--api_key", "sk-SECRET"])
    args, runtime = cfg.spec.as_record(), cfg.options.as_record()
    assert list(args) == sorted(args) and list(runtime) == sorted(runtime)
    assert not set(args) & set(runtime)
    # an optional field or group (beyond the paper) is in "args" only when set; a runtime option added
    # after runs were recorded, in "runtime_args" only when set
    added = {f.name for f in dataclasses.fields(RunOptions) if f.metadata.get("added")}
    assert set(args) | set(runtime) | config.SECRET_NAMES | set(config.OPTIONAL_DEFAULTS) | added == set(config.FIELDS)
    assert set(config.OPTIONAL_DEFAULTS) == set(DECLARED)
    assert {"p_exploration", "prob_reset", "ucb_alpha", "reward", "agent", "reasoning"} <= set(DECLARED)
    # runtime_args keeps the three exploration names, as every record before they did anything
    assert set(cfg.runtime_record()) == set(runtime) | {"p_exploration", "prob_reset", "ucb_alpha"}
    learner = cfg.spec.__class__(task_name="trec_coarse", agent="linucb").as_record()
    assert {k: learner[k] for k in ("agent", "features", "bandit_alpha", "bandit_epsilon")} == \
        {"agent": "linucb", "features": "tfidf", "bandit_alpha": 1.0, "bandit_epsilon": 0.1}
    assert "p_exploration" not in learner  # each exploration flag is its own group
    assert "SECRET" not in json.dumps([args, runtime]) and "SECRET" not in repr(cfg)
    assert cfg.secrets.hf_token == "hf_SECRET" and config.SECRET_FLAGS == ("--hf_token", "--api_key")


def test_zero_shot_is_built_without_a_strategy():
    cfg = parse_args(BASE[:-1] + ["0"])
    assert cfg.spec.context_strategy_name is None and cfg.spec.zero_shot
    with pytest.raises(UsageError, match="zero-shot run"):  # validate checks, never changes
        validate(cfg.replace(context_strategy_name="random_unbiased"))


def test_roles_come_from_the_fields():
    assert config.RUNTIME_NAMES == {f.name for f in dataclasses.fields(RunOptions)}
    # the published path's folder parts, then each declared parameter that has one, in declaration order
    assert [name for name, _, _ in config.FOLDER_FIELDS] == [
        "max_model_len", "backend", "device", "dtype", "rope_scaling", "eot_token", "published_tokenization",
        "api_model", "api_mode", *[name for name, param in DECLARED.items() if param.folder is not None]]
    assert {"p_exploration", "reward", "bandit_alpha", "reasoning"} <= {name for name, _, _ in config.FOLDER_FIELDS}
    # another reasoning budget is the same run's, refused on resume
    assert config.FOLDER_NAME_ONLY == {name for name, param in DECLARED.items() if not param.folder_value}
    assert "reasoning" in config.FOLDER_NAME_ONLY
    assert config.EXTENDING_NAMES == {"train_k"}
    # added after runs were recorded: published_tokenization, and every declared parameter (with its default)
    assert config.ADDED_DEFAULTS == {"published_tokenization": False,
                                     **{name: param.default for name, param in DECLARED.items()}}
    assert {k: config.ADDED_DEFAULTS[k] for k in ("reward", "agent", "features")} == \
        {"reward": "exact_match", "agent": "llm", "features": "tfidf"}
    assert config.RESULT_COLUMNS["context_strategy_name"] == "strategy"
    assert {"hf_token", "api_key", "batch_size", "max_model_len"} <= set(config.BACKEND_NAMES)
    assert "seed" not in config.BACKEND_NAMES and "output_dir" not in config.BACKEND_NAMES


def test_a_folder_field_names_the_run_folder_only_when_set(tmp_path):
    plain = experiment_dir(tmp_path, parse_args(BASE).spec.as_record())
    assert plain.name == "seed1_testseed3_testkall_every500"
    pubtok = experiment_dir(tmp_path, parse_args(BASE + ["--published_tokenization", "--max_model_len", "99"])
                            .spec.as_record())
    assert pubtok.name == plain.name + "_maxlen99_pubtok"


def test_unknown_fields_are_refused():
    with pytest.raises(TypeError, match="bogus"):
        RunConfig.from_values({"bogus": 1})


def test_a_setting_validation_makes_sure_of_is_read_as_set_or_named():
    """``given``: the value of a setting every validated run has; a configuration that skipped
    validation gets one line naming the flag, not a None further down."""
    from icrl.config import given

    spec = RunConfig().spec
    assert given(3, "seed") == 3 and given(False, "icrl") is False
    with pytest.raises(UsageError, match=r"^--task_name is required$"):
        given(spec.task_name, "task_name")
    with pytest.raises(UsageError, match=r"^--published_quirks is required$"):
        given(None, "published_tokenization")


def test_a_runtime_option_added_later_is_recorded_only_when_given():
    """--first_answer_timeout: in config.json's runtime_args when given, absent at its default (the
    records of every run without it stay as they were); never in args or the run folder's name."""
    plain = RunConfig()
    given = plain.replace(first_answer_timeout=5.0)
    assert "first_answer_timeout" not in plain.runtime_record()
    assert given.runtime_record() == {**plain.runtime_record(), "first_answer_timeout": 5.0}
    assert given.spec.as_record() == plain.spec.as_record() and "first_answer_timeout" in config.RUNTIME_NAMES
