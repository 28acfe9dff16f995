"""Bad input, refused in one line (a UsageError: exit 2) before any model loads and before
anything is written:

- ``check_flags(values)``: the flags as parsed, before they are resolved into a configuration
  (combinations the published script accepted silently or that would fail late);
- ``validate(config)``: the configuration (pure: it reads it and changes nothing); a part of
  the method is checked from its declaration (``icrl.method.registry``).

An error names a flag as the user typed it when it can (``spelled``: flag name -> the option
string used), else by its first spelling in --help."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..backends import BACKEND_CHOICES, backends_taking, has_local_model, resolve_backend_name, takes_option
from ..config import BACKEND_NAMES, LEARNER_ONLY, LLM_ONLY, RunConfig, RunSpec, flag_of
from ..method.shape import RunShape
from ..method.strategies.base import unread_settings
from .flags import default_of
from ..errors import UsageError
from ..method import agents, exploration, rewards
from ..method.agents import is_learner
from ..method.strategies import STRATEGIES, strategy_of, strategy_params
from ..method.strategies.base import owners_of
from ..run.assemble import calls_of
from ..tasks import parse_task_name

DTYPES = ("auto", "float32", "bfloat16", "float16", "half", "float")
API_ONLY = ("api_mode", "api_model")  # settings of what a run computes that only the API backends read
MAX_WINDOW = 1 << 24  # 16M tokens: above any model's window; a bigger number is a typo


def check_flags(values: Mapping[str, Any]) -> None:
    """The parsed flags (a run_experiment.py parser's values), before zero-shot and learner runs
    are resolved: what cannot be right whatever the rest says."""
    if not str(values["output_dir"]).strip():
        raise UsageError("--output_dir is empty; give the results folder (default: data)")
    if values["context_strategy_name"] is not None:
        STRATEGIES.get(values["context_strategy_name"])  # unknown: one line with the choices
    if values["icrl_flip_feedback_prob"] is not None and not values["icrl_flip_feedback"]:
        raise UsageError("--icrl_flip_feedback_prob is set but --icrl_flip_feedback is not: add --icrl_flip_feedback, "
                         "or drop the probability")
    if values["icrl_omit_feedback"] and values["icrl"] is False:
        raise UsageError("--icrl_omit_feedback only applies to ICRL; drop it or use --icrl")
    if values["max_model_len"] is not None and values["max_model_len"] > MAX_WINDOW:
        raise UsageError(f"--max_model_len {values['max_model_len']} is larger than any model's window "
                         f"(at most {MAX_WINDOW}); give the window in tokens, e.g. 8192")
    if values["base_url"] and values["backend"] != "auto" and not _takes(values["backend"], "base_url"):
        served = _either(backends_taking("base_url"))
        raise UsageError(f"--base_url is for --backend {served}, not {values['backend']}; drop it or use one of those")
    if values["dtype"] not in DTYPES:
        raise UsageError(f"unknown --dtype {values['dtype']!r}; use {', '.join(DTYPES[:4])}")
    for name in API_ONLY:  # they name the run's folder: taken silently, they would only rename it
        if values[name] != default_of(name) and not is_learner(values["agent"]) \
                and not (values["backend"] != "auto" and _takes(values["backend"], name)):
            chosen = values["backend"] + (" (a local engine)" if values["backend"] == "auto" else "")
            raise UsageError(f"{flag_of(name)} {values[name]} is for --backend {_either(backends_taking(name))}, not "
                             f"{chosen}: it does nothing there; drop it")


def _takes(backend: str, option: str) -> bool:
    """Whether ``backend`` (a registered name, not "auto") takes ``option`` (``icrl.backends``)."""
    return backend in BACKEND_CHOICES and takes_option(backend, option)


def _either(names: list[str]) -> str:
    """``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def ignored_settings(values: Mapping[str, Any], spelled: Optional[Mapping[str, str]] = None) -> tuple[str, ...]:
    """The published settings given that the chosen method does not read, one warning each (the
    parsed flags, before zero-shot is resolved): --max_contexts and
    --approximate_context_sampling_method outside the approximate strategies, a strategy for a
    zero-shot run, --max_context_examples for a strategy it does not size (``reads``: the
    summaries). The published script accepted them (its README passes the first two with
    the approximate commands, and a zero-shot run needed a strategy name there), so they are
    not refused: the run goes on without them and says so."""
    warnings = []
    strategy = values["context_strategy_name"]
    zero_shot = values["max_context_examples"] == 0
    if zero_shot and strategy is not None:
        warnings.append(f"{flag_name('context_strategy_name', spelled)} {strategy} does nothing for a zero-shot run "
                        f"(--max_context_examples 0, no context): ignored")
    who = "a zero-shot run" if zero_shot else f"--context_strategy_name {strategy}"
    for name in unread_settings(RunShape.of_args({**values, "context_strategy_name": None if zero_shot else strategy})):
        if values[name] != default_of(name):  # (a learner, or no strategy at all, is refused by validate)
            owners = [e.base for e in STRATEGIES if name in e.cls.uses]
            warnings.append(f"{flag_name(name, spelled)} {values[name]} does nothing for {who} (only the "
                            f"{' and '.join(dict.fromkeys(owners))} strategies read it): ignored")
    entry = STRATEGIES.get(strategy) if strategy in STRATEGIES and not zero_shot else None
    if entry is not None and values["max_context_examples"] is not None \
            and "max_context_examples" not in entry.cls.reads:
        warnings.append(f"{flag_name('max_context_examples', spelled)} {values['max_context_examples']} does nothing "
                        f"for {who} (its context: {entry.cls.summary}): ignored")
    return tuple(warnings) + unread_backend_options(values, spelled)


# How a backend runs, read by it alone (the size search and the prompts read the tokenizer's
# settings whatever the backend; --api_model and --api_mode name the run's folder; secrets are
# never shown).
BACKEND_ONLY = ("max_concurrency", "timeout", "max_retries", "first_answer_timeout", "batch_size",
                "tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend",
                "gpu_memory_utilization", "enforce_eager")


def unread_backend_options(values: Mapping[str, Any], spelled: Optional[Mapping[str, str]] = None) -> tuple[str, ...]:
    """One warning per backend option given that the run's backend does not take (``--timeout``
    with ``--backend vllm``): accepted, so a command meant for another machine's backend still
    runs (the vLLM options are checked whatever the backend), and said. A learner loads no
    backend of its own: nothing to say."""
    given = [option for option in BACKEND_ONLY if values[option] != default_of(option)]
    if is_learner(values["agent"]) or not given:
        return ()
    backend = resolve_backend_name(values["backend"])  # "auto" asks torch for a GPU: only when it matters
    warnings = []
    for option in given:
        if not takes_option(backend, option):
            readers = [name for name in BACKEND_CHOICES if name != "auto" and takes_option(name, option)]
            chosen = f"--backend {backend}" + (" (auto)" if values["backend"] == "auto" else "")
            names = " and ".join(readers) if len(readers) < 3 else f"{', '.join(readers[:-1])} and {readers[-1]}"
            warnings.append(f"{flag_name(option, spelled)} {values[option]} does nothing for {chosen} (only the "
                            f"{names} backend{'s' if len(readers) > 1 else ''} read"
                            f"{'' if len(readers) > 1 else 's'} it): ignored")
    return tuple(warnings)


def validate(config: RunConfig, spelled: Optional[Mapping[str, str]] = None, weights: bool = True) -> None:
    """Reject bad combinations with a one-line UsageError (nothing loaded, nothing written).
    ``spelled``: how the user typed each flag (for the messages). ``weights=False``: the run is
    only planned (run_sweep.py --estimate), so its model needs only a tokenizer and no device."""
    s, o = config.spec, config.options
    if not s.task_name:
        raise UsageError("--task_name is required (e.g. banking77); run with no arguments for the demo")
    parse_task_name(s.task_name)
    validate_agent(config, spelled)
    strategy = s.context_strategy_name
    if s.max_context_examples == 0:
        if strategy is not None:
            raise UsageError("a zero-shot run (--max_context_examples 0) has no context strategy; "
                             "drop --context_strategy_name")  # parse_args clears it before building
    elif not strategy and not is_learner(s.agent):
        raise UsageError(f"--context_strategy_name is required; choose one of: {', '.join(STRATEGIES.names())}")
    validate_strategy(config, spelled)
    if s.icrl is None:
        raise UsageError("pass --icrl (in-context RL) or --no-icrl (supervised ICL): the published script "
                         "silently runs supervised ICL when both are omitted")
    unseeded = [f"--{name}" for name in ("seed", "training_seed", "test_seed") if getattr(s, name) is None]
    if unseeded:
        raise UsageError(f"pass {', '.join(unseeded)} (the paper uses 100 for each): the published script "
                         f"runs unseeded when they are omitted")
    if not (0 < s.context_p_keep <= 1):
        raise UsageError(f"--context_p_keep must be in (0, 1], got {s.context_p_keep}")
    if s.icrl_flip_feedback:
        q = s.icrl_flip_feedback_prob
        if q is None or math.isnan(q) or not 0 <= q <= 1:
            raise UsageError("--icrl_flip_feedback needs --icrl_flip_feedback_prob in [0, 1]")
        if not s.icrl:
            raise UsageError("--icrl_flip_feedback only applies to ICRL; drop it or use --icrl")
    if s.test_every is None or s.test_every <= 0:
        raise UsageError(f"--test_every must be a positive number of steps, got {s.test_every}")
    if not 0 <= s.temperature < math.inf:
        raise UsageError(f"--temperature must be a finite number >= 0, got {s.temperature}")
    if s.max_model_len is not None and s.max_model_len < 1:
        raise UsageError(f"--max_model_len must be a positive number of tokens, got {s.max_model_len}")
    if s.max_context_examples is not None and s.max_context_examples < 0:
        raise UsageError(f"--max_context_examples must be >= 0, got {s.max_context_examples}")
    for name in ("train_k", "test_k"):
        value = getattr(s, name)
        if value == 0 or value < -1:
            raise UsageError(f"--{name} must be positive or -1 (all), got {value}")
    if s.exemplars_per_label < 0:
        raise UsageError(f"--exemplars_per_label must be >= 0, got {s.exemplars_per_label}")
    if o.debug_k < 0 or (o.batch_size is not None and o.batch_size < 1):
        raise UsageError("--debug_k must be >= 0 and --batch_size >= 1")
    if any(seed is not None and seed < 0 for seed in (s.seed, s.training_seed, s.test_seed)):  # all set here
        raise UsageError("seeds must be >= 0")
    if not s.icrl and strategy and strategy_of(strategy).filter:
        raise UsageError("supervised ICL (--no-icrl) episodes have no feedback to filter on; "
                         "use an unfiltered strategy such as random_unbiased")
    exploration.check_exploration(config.exploration, config.shape)
    rewards.check_reward(config.reward_setting, config.shape)
    validate_backend_flags(config)
    validate_model(config, weights)


def validate_model(config: RunConfig, weights: bool = True) -> None:
    """The model folder (its tokenizer alone without ``weights``) and the device of a run on a local
    backend; a hosted or fake backend's model name is a label, not a folder (its class says so:
    ``icrl.backends.has_local_model``)."""
    s = config.spec
    if not is_learner(s.agent) and has_local_model(s.backend):
        validate_model_path(s.model_name, weights)
        if weights:
            validate_device(s.device)


def validate_backend_flags(config: RunConfig) -> None:
    """The vLLM flags are checked whatever the backend, so a typo never waits for a GPU run."""
    s, o = config.spec, config.options
    if o.max_concurrency < 1 or not 0 < o.timeout < math.inf or o.max_retries < 0:
        raise UsageError(f"--max_concurrency must be >= 1, --timeout a finite number of seconds above 0 and "
                         f"--max_retries >= 0; got {o.max_concurrency}, {o.timeout} and {o.max_retries}")
    if not 0 < o.first_answer_timeout < math.inf:
        raise UsageError(f"--first_answer_timeout must be a finite number of seconds above 0, got "
                         f"{o.first_answer_timeout}")
    from ..backends.vllm_backend import engine_args  # pure functions; vLLM itself is not imported

    engine_args(s.model_name, tensor_parallel_size=o.tensor_parallel_size,
                pipeline_parallel_size=o.pipeline_parallel_size,
                distributed_executor_backend=o.distributed_executor_backend,
                gpu_memory_utilization=o.gpu_memory_utilization, rope_scaling=s.rope_scaling)


def validate_model_path(name: str, weights: bool = True) -> None:
    """A local model directory must exist and hold a model (not reported as a failed download).
    ``weights=False``: only the tokenizer is needed (a folder with its files, or a Hub id with a
    copy under $ICRL_TOKENIZERS_DIR, in the Hub cache, or downloadable)."""
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return
    if path.is_file():
        raise UsageError(f"--model_name {name!r} is a file; give the model's folder (with config.json, the "
                         f"tokenizer and the weights) or a .gguf file")
    if path.is_dir() and not weights:
        check_tokenizer_folder(name, path)
        return
    if path.is_dir():
        if not (path / "config.json").is_file() and not any(path.glob("*.gguf")):
            raise UsageError(f"--model_name {name!r} is a folder without a model (no config.json in it)")
        if (path / "config.json").is_file():
            check_model_folder(name, path)
        return
    from ..infra import hub
    from ..backends.chat import looks_like_path, tokenizer_copy
    from ..backends.embedded import EMBEDDED_MODELS

    if looks_like_path(name):
        raise UsageError(f"--model_name {name!r}: no such local folder")
    if name in EMBEDDED_MODELS:
        return
    if not hub.plausible_id(name):
        raise UsageError(f"unknown --model_name {name!r}: give a Hugging Face id (org/name), a local directory, "
                         f"or the embedded {', '.join(EMBEDDED_MODELS)}")
    if not weights and tokenizer_copy(name) is not None:
        return
    local = "a local directory" if weights else \
        f"a tokenizer folder, or put its copy {name.replace('/', '__')}/ under $ICRL_TOKENIZERS_DIR"
    if hub.offline() and not hub.model_cached(name):
        raise UsageError(f"--model_name {name!r} is not available offline: HF_HUB_OFFLINE is set and it is not in "
                         f"the Hugging Face cache ({hub.hub_cache()}); go online to download it once, or give {local}")
    if not hub.offline() and not hub.model_cached(name):
        why = hub.unreachable()
        if why is not None:
            raise UsageError(f"cannot download --model_name {name!r} from the Hugging Face Hub ({why}); go online, "
                             f"or give {local}")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt")
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf", "*.safetensors.index.json")


def check_model_folder(name: str, path: Path) -> None:
    """A local model folder must have a readable config.json, a tokenizer and weights: else
    transformers fails deep inside its loaders with a traceback or a misleading hint."""
    import json

    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"--model_name {name!r}: its config.json is not valid JSON ({type(exc).__name__}); "
                         f"replace it with the model's original config.json") from None
    if not isinstance(config, dict) or not config.get("model_type"):
        raise UsageError(f"--model_name {name!r}: its config.json has no model_type; replace it with the "
                         f"model's original config.json")
    if not any((path / file).is_file() for file in TOKENIZER_FILES):
        raise UsageError(f"--model_name {name!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                         f"copy the model's tokenizer files into it")
    if not any(any(path.glob(pattern)) for pattern in WEIGHT_PATTERNS):
        raise UsageError(f"--model_name {name!r} has no weights (no *.safetensors or *.bin file); copy the "
                         f"model's weights into it")


def check_tokenizer_folder(name: str, path: Path) -> None:
    """A folder the tokenizer alone is read from: its tokenizer files, and a config.json (where
    the model's window is read) that parses when there is one; no weights needed."""
    import json

    if not any((path / file).is_file() for file in TOKENIZER_FILES):
        raise UsageError(f"--model_name {name!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                         f"give the folder of the model's tokenizer files and its config.json")
    if not (path / "config.json").is_file():
        return
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        config = None
    if not isinstance(config, dict):
        raise UsageError(f"--model_name {name!r}: its config.json is not a JSON object; replace it with the "
                         f"model's original config.json")


def validate_device(device: Optional[str]) -> None:
    """--device cuda / cuda:N needs that GPU to be visible (checked before any data or model loads)."""
    if not device or not device.startswith("cuda"):
        return
    import torch

    from ..backends.hf import _check_device

    _check_device(torch, device)


def validate_strategy(config: RunConfig, spelled: Optional[Mapping[str, str]] = None) -> None:
    """The strategy's name, its settings (its declaration's ``check``), its own parameters; a
    parameter of another strategy is refused."""
    s = config.spec
    name = s.context_strategy_name
    entry = strategy_of(name) if name is not None else None
    mine = {p.name for p in entry.cls.params} if entry else set()
    for param in strategy_params():
        value = getattr(s, param.name)
        if value != param.default and param.name not in mine:
            raise UsageError(f"{flag_name(param.name, spelled)} only applies to --context_strategy_name "
                             f"{' or '.join(owners_of(param.name))}")
        problem = param.problem(value)
        if problem:
            raise UsageError(problem)
    if entry is not None and name is not None:  # an entry comes from a name
        entry.cls.check(name, config.values())


def flag_name(name: str, spelled: Optional[Mapping[str, str]] = None) -> str:
    """The flag of field ``name`` as the user typed it, else its first spelling in --help."""
    if spelled and name in spelled:
        return spelled[name]
    return flag_of(name)


class WrongAgentSetting(UsageError):
    """A setting given to the kind of agent (LLM or learner) that does not take it; a sweep that
    crossed both kinds with one base says how to split them (icrl.sweep.runner)."""


def refuse_settings(spec: RunSpec, names: Sequence[str], who: str, spelled: Optional[Mapping[str, str]] = None) -> None:
    """Raise WrongAgentSetting naming every field of ``names`` that is set (differs from its default)."""
    given = [flag_name(n, spelled) for n in names if getattr(spec, n) != default_of(n)]
    if given:
        verb = "only applies" if len(given) == 1 else "only apply"
        raise WrongAgentSetting(f"{', '.join(given)} {verb} to {who}")


def validate_agent(config: RunConfig, spelled: Optional[Mapping[str, str]] = None) -> None:
    """A learner (--agent linucb|epsilon_greedy|supervised) takes none of an LLM's settings, and an
    LLM none of a learner's; a learner's own parameters go with it (``icrl.method.agents.validate``)."""
    s = config.spec
    agents.AGENTS.get(s.agent)
    learners = ", ".join(name for name in agents.AGENTS.names() if is_learner(name))
    if not is_learner(s.agent):
        refuse_settings(s, LEARNER_ONLY, f"a learner (--agent {' or '.join(learners.rsplit(', ', 1))}); drop them "
                                         f"for an LLM run", spelled)
    else:  # a learner whose reward's call names a model (icrl.method.calls) takes the settings that load it
        loading = {"backend", *BACKEND_NAMES} if any(call.model_name(config.call_options)
                                                     for call in calls_of(config)) else set()
        refuse_settings(s, [n for n in LLM_ONLY if n not in loading],
                        f"an LLM; --agent {s.agent} is a learner on text features: drop them", spelled)
    agents.check_agent(config.agent_setting)
