"""Presets: the published command lists as sweeps.

``paper_main``: the 20 run_experiment.py commands of the published README (Naive,
Naive+, Stochastic ICRL and the supervised-ICL upper bound, each on banking77, clinic150,
trec_coarse, trec_fine and nlu), flag for flag, without --model_name and --hf_token, which
the user gives (``--model_name X`` after the preset; a gated model also needs --hf_token).
As published, clinic150 runs of Naive and Naive+ pass no --test_k (the whole test split).

``paper_unsemantic``: the same 20 runs on the abstract-label tasks (the published README:
add ``_unsemantic`` to the task name).
"""

from __future__ import annotations

from ..errors import UsageError

TASKS = ("banking77", "clinic150", "trec_coarse", "trec_fine", "nlu")
TRAIN_K = {"banking77": 10000, "clinic150": 10000, "trec_coarse": 5000, "trec_fine": 5000, "nlu": 10000}
# (family, strategy, temperature, p_keep, icrl, tasks whose published command has no --test_k)
FAMILIES = (
    ("naive", "random_biased_end", "1.0", "1.0", True, {"clinic150"}),
    ("naive_plus", "random_biased_end_only_positive", "2.0", "1.0", True, {"clinic150"}),
    ("stochastic", "random_unbiased_only_positive", "1.0", "0.1", True, set()),
    ("supervised_icl", "random_unbiased", "1.0", "1.0", False, set()),
)


def _paper(suffix: str = "") -> list[list[str]]:
    runs = []
    for _, strategy, temperature, p_keep, icrl, no_test_k in FAMILIES:
        for task in TASKS:
            words = ["--task_name", task + suffix, "--context_strategy_name", strategy,
                     "--temperature", temperature, "--context_p_keep", p_keep,
                     "--icrl" if icrl else "--no-icrl", "--no-icrl_omit_feedback", "--no-icrl_flip_feedback",
                     "--train_k", str(TRAIN_K[task]), "--test_every", "500"]
            if task not in no_test_k:
                words += ["--test_k", "500"]
            words += ["--debug_k", "10", "--seed", "100", "--training_seed", "100", "--test_seed", "100",
                      "--no-verbose"]
            runs.append(words)
    return runs


PRESETS = {
    "paper_main": ("the 20 commands of the published README (4 methods x 5 tasks)", lambda: _paper()),
    "paper_unsemantic": ("the same 20 runs on the abstract-label (_unsemantic) tasks", lambda: _paper("_unsemantic")),
}


def preset_runs(name: str) -> list[list[str]]:
    if name not in PRESETS:
        raise UsageError(f"unknown --preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name][1]()


def preset_help() -> str:
    return "; ".join(f"{name}: {text}" for name, (text, _) in PRESETS.items())
