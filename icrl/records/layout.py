"""Where a run's records live: the run directory's path (the published layout plus ``run_folder``)
and the names of the files in it. See the package docstring for the layout."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Union

from ..method.agents import agent_folder
from ..method.strategies import STRATEGIES
from ..config import FOLDER_FIELDS, FOLDER_NAME_ONLY
from .safepaths import folder_name, inside, model_folder
from ..tasks import task_folder

FORMAT_VERSION = 1
CONFIG, TRAIN, TEST, RESULTS, LOG = "config.json", "train.jsonl", "test.jsonl", "results.json", "log.txt"
MAX_CONTEXT_FILE = "maximum_context_length.json"


def experiment_dir(output_dir: Union[str, os.PathLike[str]], args: dict[str, Any]) -> Path:
    """The published directory layout for one experiment's arguments, plus ``run_folder``; a
    learner's run (``--agent`` other than llm) has ``agent+<agent>+<features>`` in place of the
    model's folder (no model folder holds a '+', so it is distinct from every LLM run's)."""
    name = args["context_strategy_name"]
    if args["max_context_examples"] == 0 or not name:
        strategy = "none"  # zero-shot has no context to pick
    else:  # the strategy's declaration names its folder (approximate: _<method>_<K> added)
        strategy = STRATEGIES.get(name).cls.folder(name, args) if name in STRATEGIES else name
    if args.get("exemplars_per_label"):
        strategy += f"_exemplars{args['exemplars_per_label']}"
    flip = str(args["icrl_flip_feedback"])
    if args["icrl_flip_feedback"]:
        flip += f"_{args['icrl_flip_feedback_prob']}"
    size = args["max_context_examples"]
    first = agent_folder(args) if args.get("agent", "llm") != "llm" else model_folder(args["model_name"])
    parts = [first, folder_name(task_folder(args["task_name"])), "auto" if size is None else str(size),
             str(args["icrl"]),
             strategy, str(args["context_p_keep"]), str(args["icrl_omit_feedback"]), flip,
             str(args["temperature"]), str(args["training_seed"]), run_folder(args)]
    return inside(output_dir, *parts)


# Identity arguments outside the published path that are named in run_folder only when they
# differ from their default (argument, default, short name): the fields with a "folder" role.
OPTIONAL_FOLDER_ARGS = FOLDER_FIELDS


def run_folder(args: dict[str, Any]) -> str:
    """The last folder of a run's path: what the published path lacks and changes results.

    ``seed<seed>_testseed<test_seed>_testk<k|all>_every<test_every>``, then, only when set
    to something other than their default, ``_maxlen<n>``, ``_<backend>``, ``_<device>``,
    ``_<dtype>``, ``_rope<spec>``, ``_eot<token>``, ``_pubtok``, ``_apimodel<name>``,
    ``_api<mode>`` (characters other than letters, digits, ``.`` and ``-`` become ``-``).
    ``train_k`` is left out on purpose (a longer run extends a shorter one), and so are the
    runtime arguments (``config.RunOptions``), which do not change what a run computes.
    """
    test_k = args.get("test_k", -1)
    name = (f"seed{args.get('seed')}_testseed{args.get('test_seed')}_"
            f"testk{'all' if test_k in (-1, None) else test_k}_every{args.get('test_every')}")
    for key, default, short in OPTIONAL_FOLDER_ARGS:
        value = args.get(key, default)
        if value == default:
            continue
        name += "_" + short + ("" if value is True or key in FOLDER_NAME_ONLY else _safe(str(value)))
    return name


def _safe(text: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in ".-") else "-" for c in text)


def max_context_path(output_dir: Union[str, os.PathLike[str]], model_name: str, task_name: str) -> Path:
    return inside(output_dir, model_folder(model_name), folder_name(task_folder(task_name)), MAX_CONTEXT_FILE)


def find_runs(root: Union[str, os.PathLike[str]]) -> list[Path]:
    """Every experiment directory below ``root``: one holding config.json that is a run's (see
    ``is_run_folder``). Other folders with a config.json (a model's or a tokenizer's copied
    under the data folder, as ``make gpu-assets`` does) are not runs and are left out silently."""
    return sorted(p.parent for p in Path(root).rglob(CONFIG) if is_run_folder(p.parent))


def is_run_folder(directory: Path) -> bool:
    """Whether ``directory`` holds a run's records: its config.json is a run's (a JSON object
    with ``format_version`` or ``args``), or one of the run's other files is beside it. A
    config.json that cannot be read counts as a run's (the readers report it as damaged);
    a readable one of another kind (a model's: ``architectures``, ``model_type``) does not."""
    if any((directory / name).is_file() for name in (TRAIN, TEST, RESULTS, LOG)):
        return True
    try:
        config = json.loads((directory / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    return not isinstance(config, dict) or "format_version" in config or "args" in config
