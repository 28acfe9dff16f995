"""Presets: the published command lists as sweeps.

``paper_main``: the 20 run_experiment.py commands of the published README (Naive,
Naive+, Stochastic ICRL and the supervised-ICL upper bound, each on banking77, clinic150,
trec_coarse, trec_fine and nlu), flag for flag, without --model_name and --hf_token, which
the user gives (``--model_name X`` after the preset; a gated model also needs --hf_token).
As published, clinic150 runs of Naive and Naive+ pass no --test_k (the whole test split).

``paper_unsemantic``: the same 20 runs on the abstract-label tasks (the published README:
add ``_unsemantic`` to the task name).

The final paper's further studies (lil-lab/icrl at ab1d465, "v2"; its README gives only the 20
commands, so these are read from what its figure code ``src/plot/plotting.py`` selects):

``qwen_scale``: the 20 commands for each of Qwen2.5-{0.5,1.5,3,7,14,32,72}B-Instruct
(``plot_scaling_qwen_results``: upper bound, naive, naive+ at 2.0, stochastic with the automatic
context size). The published YaRN handling (factor 4 over 32768 positions for every Qwen2.5
model) is this package's default ``--rope_scaling auto``.

``naive_plus_temperature``: banking77 with Qwen2.5-7B-Instruct and Llama-3.1-8B-Instruct, naive
and naive+ (``plot_naive_plus_temperature_sensitivity`` draws both strategies, p_keep 1.0) at
temperatures 0.0, 0.5, ..., 4.0. The other flags are those of banking77's README commands: the
figure code does not constrain them.

``icrl_bench``: the benchmark suite behind one score per model (:mod:`icrl.analysis.benchmark`,
docs/tools.md "The benchmark score"): on each of ``BENCH_TASKS`` and seeds 100, 101, 102
(``--seed`` = ``--training_seed``; the test set kept, ``--test_seed 100``, 500 items, temperature
1.0), zero-shot, supervised ICL (``random_unbiased``, gold labels) and explorative ICRL
(``random_unbiased_only_positive``, p_keep 0.1): 36 runs, the two with contexts 2,000 steps at
128 episodes at most, tested every 500 steps. After the sweep, run_sweep.py prints each model's
score with its interval.

``stability``: the 20 commands with seeds 100 (published) to 104, ``--seed`` and
``--training_seed`` together, the test set kept (``--test_seed 100``). Not the paper's setting:
its stability figure (``plot_scaling_qwen_results_stability``) is Spearman's rho of test accuracy
over test steps of one run per model, task and method (its code asserts one run each); which
seeds, if any, the final paper ran is not in the repository. Draw that figure from ``qwen_scale``.
"""

from __future__ import annotations

from ..analysis.benchmark import BENCH_SEEDS, BENCH_TASKS
from ..errors import UsageError

TASKS = ("banking77", "clinic150", "trec_coarse", "trec_fine", "nlu")
TRAIN_K = {"banking77": 10000, "clinic150": 10000, "trec_coarse": 5000, "trec_fine": 5000, "nlu": 10000}
# (family, strategy, temperature, p_keep, icrl, tasks whose published command has no --test_k)
FAMILIES: tuple[tuple[str, str, str, str, bool, set[str]], ...] = (
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


QWEN_SCALE = tuple(f"Qwen/Qwen2.5-{size}-Instruct" for size in ("0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B"))
TEMPERATURE_MODELS = ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Meta-Llama-3.1-8B-Instruct")
TEMPERATURES = ("0.0", "0.5", "1.0", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0")
STABILITY_SEEDS = (100, 101, 102, 103, 104)


def _set(words: list[str], flag: str, value: str) -> list[str]:
    """``words`` with ``flag``'s value replaced (the flag must be there)."""
    out = list(words)
    out[out.index(flag) + 1] = value
    return out


def _scale() -> list[list[str]]:
    return [["--model_name", model, *run] for model in QWEN_SCALE for run in _paper()]


def _temperature() -> list[list[str]]:
    banking = [run for run in _paper() if run[1] == "banking77"]
    naive = [run for run in banking if run[3] in ("random_biased_end", "random_biased_end_only_positive")]
    return [["--model_name", model, *_set(run, "--temperature", t)]
            for model in TEMPERATURE_MODELS for run in naive for t in TEMPERATURES]


def _stability() -> list[list[str]]:
    return [_set(_set(run, "--seed", str(seed)), "--training_seed", str(seed))
            for seed in STABILITY_SEEDS for run in _paper()]


# The suite's sizes: 2,000 steps and contexts of at most 128 episodes keep one 8B model within a
# few GPU-hours (docs/tools.md: the estimate); 500 test items detect about +0.09 at accuracy 0.5.
BENCH_SIZE = ["--train_k", "2000", "--test_every", "500", "--max_context_examples", "128"]


def _bench() -> list[list[str]]:
    runs = []
    for task in BENCH_TASKS:
        for seed in BENCH_SEEDS:
            common = ["--task_name", task, "--temperature", "1.0", "--test_k", "500", "--test_seed", "100",
                      "--seed", str(seed), "--training_seed", str(seed), "--no-verbose"]
            runs.append([*common, "--max_context_examples", "0", "--icrl"])  # zero-shot
            runs.append([*common, "--context_strategy_name", "random_unbiased", "--context_p_keep", "1.0", "--no-icrl",
                         *BENCH_SIZE])  # supervised ICL
            runs.append([*common, "--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.1",
                         "--icrl", *BENCH_SIZE])  # explorative ICRL
    return runs


PRESETS = {
    "paper_main": ("the 20 commands of the published README (4 methods x 5 tasks)", lambda: _paper()),
    "paper_unsemantic": ("the same 20 runs on the abstract-label (_unsemantic) tasks", lambda: _paper("_unsemantic")),
    "qwen_scale": ("the 20 for each Qwen2.5 Instruct model, 0.5B to 72B (final paper; YaRN as published)", _scale),
    "naive_plus_temperature": ("banking77, naive and naive+ at temperatures 0 to 4, Qwen2.5-7B and Llama-3.1-8B "
                               "(final paper)", _temperature),
    "stability": ("the 20 with seeds 100-104 (seed and training seed; test set kept)", _stability),
    "icrl_bench": ("the benchmark suite: zero-shot, supervised ICL and explorative ICRL on 4 tasks x 3 seeds, "
                   "ending with each model's benchmark score", _bench),
}


def preset_runs(name: str) -> list[list[str]]:
    if name not in PRESETS:
        raise UsageError(f"unknown --preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name][1]()


def preset_help() -> str:
    return "; ".join(f"{name}: {text}" for name, (text, _) in PRESETS.items())

