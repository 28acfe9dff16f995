"""The final paper's presets (icrl/cli/presets.py), checked against the settings its repository
(lil-lab/icrl at ab1d465) gives: the README's commands, the models, temperatures and methods its
figure code (src/plot/plotting.py) selects, and the YaRN setting of src/model/model.py."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest

from icrl.backends.rope import resolve_rope_scaling
from icrl.cli.presets import PRESETS, preset_runs

REPO = Path(__file__).resolve().parents[3]
# plotting.py MODEL_TO_NAME, the Qwen entries, in its order
PUBLISHED_QWEN = ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct",
                  "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-32B-Instruct",
                  "Qwen/Qwen2.5-72B-Instruct"]
# plot_naive_plus_temperature_sensitivity: temperature_order
PUBLISHED_TEMPERATURES = ["0.0", "0.5", "1.0", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0"]


def flag(run: list, name: str):
    return run[len(run) - 1 - run[::-1].index(name) + 1] if name in run else None


def without(run: list, *names: str) -> list:
    out, skip = [], False
    for word in run:
        if skip:
            skip = False
            continue
        if word in names:
            skip = True
            continue
        out.append(word)
    return out


def test_qwen_scale_is_the_main_commands_for_each_published_qwen_model():
    runs = preset_runs("qwen_scale")
    assert [flag(r, "--model_name") for r in runs[::20]] == PUBLISHED_QWEN
    main = preset_runs("paper_main")
    for i, model in enumerate(PUBLISHED_QWEN):
        assert [without(r, "--model_name") for r in runs[20 * i:20 * (i + 1)]] == main
    # model.py: rope_scaling {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert {resolve_rope_scaling(m, None) for m in PUBLISHED_QWEN} == {"yarn:4.0:32768"}
    assert all(flag(r, "--rope_scaling") is None for r in runs)  # auto, the default, as published


def test_temperature_preset_covers_the_published_grid():
    runs = preset_runs("naive_plus_temperature")
    assert len(runs) == 2 * 2 * 9
    cells = Counter((flag(r, "--model_name"), flag(r, "--context_strategy_name"), flag(r, "--temperature"))
                    for r in runs)
    assert set(cells.values()) == {1}
    assert {c[0] for c in cells} == {"Qwen/Qwen2.5-7B-Instruct", "meta-llama/Meta-Llama-3.1-8B-Instruct"}
    assert {c[1] for c in cells} == {"random_biased_end", "random_biased_end_only_positive"}
    assert sorted({c[2] for c in cells}, key=float) == PUBLISHED_TEMPERATURES
    assert {flag(r, "--task_name") for r in runs} == {"banking77"}
    assert {flag(r, "--context_p_keep") for r in runs} == {"1.0"} and all("--icrl" in r for r in runs)


def test_stability_varies_seed_and_training_seed_only():
    runs = preset_runs("stability")
    main = preset_runs("paper_main")
    assert len(runs) == 5 * len(main)
    seeds = [(flag(r, "--seed"), flag(r, "--training_seed"), flag(r, "--test_seed")) for r in runs]
    assert {s for s, t, _ in seeds} == {"100", "101", "102", "103", "104"} and all(s == t for s, t, _ in seeds)
    assert {t for _, _, t in seeds} == {"100"}
    assert [without(r, "--seed", "--training_seed") for r in runs[:20]] == \
        [without(r, "--seed", "--training_seed") for r in main]
    assert runs[:20] == main  # seed 100 is the published command list


def sweep_main():
    spec = importlib.util.spec_from_file_location("run_sweep", REPO / "run_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.mark.parametrize("preset, n, model_flags", [
    ("qwen_scale", 140, []), ("naive_plus_temperature", 36, []), ("stability", 100, ["--model_name", "m"]),
    ("icrl_bench", 36, ["--model_name", "m"])])
def test_dry_run_lists_every_run_and_its_folder(preset, n, model_flags, tmp_path, capsys):
    """--backend fake: the model names are not checked against the Hub, so every run is valid."""
    code = sweep_main()(["--preset", preset, "--dry_run", "--backend", "fake", "--output_dir", str(tmp_path),
                         *model_flags])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("python run_experiment.py ") == n and out.count(f"    -> {tmp_path}") == n
    assert f"{n} runs, 0 invalid; dry run, nothing loaded" in out
    assert not any(tmp_path.iterdir())


def test_preset_help_names_every_preset():
    from icrl.cli.presets import preset_help

    assert all(name in preset_help() for name in PRESETS)


def test_the_bench_suite_is_three_methods_on_each_task_and_seed():
    """Per task and seed: zero-shot, supervised ICL and explorative ICRL, on one test set."""
    from icrl.analysis.runs import method_of
    from icrl.analysis.benchmark import BENCH_SEEDS, BENCH_TASKS

    runs = preset_runs("icrl_bench")
    methods = Counter()
    for run in runs:
        zero = flag(run, "--max_context_examples") == "0"
        mode = "zero_shot" if zero else "icrl" if "--icrl" in run else "icl"
        p_keep = float(flag(run, "--context_p_keep") or 1)
        methods[(flag(run, "--task_name"), flag(run, "--seed"),
                 method_of(mode, flag(run, "--context_strategy_name") or "", p_keep))] += 1
        assert (flag(run, "--test_seed"), flag(run, "--test_k"), flag(run, "--temperature")) == ("100", "500", "1.0")
        assert flag(run, "--seed") == flag(run, "--training_seed")
    assert methods == Counter({(t, str(s), m): 1 for t in BENCH_TASKS for s in BENCH_SEEDS
                               for m in ("zero-shot", "ICL", "explorative")})


def test_the_bench_sweep_ends_with_each_models_score(data_dir, tmp_path, capsys):
    code = sweep_main()(["--preset", "icrl_bench", "--backend", "fake", "--model_name", "m", "--train_k", "6",
                         "--test_every", "3", "--test_k", "8", "--output_dir", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    # the fake backend gains nothing from gold labels: no score, and why, with its gain and gap
    assert out[-1].startswith("benchmark score: m (fake): no ICRL benchmark score: supervised ICL does not beat "
                              "zero-shot beyond noise") and "4 tasks" in out[-1], out[-1]
    assert "ICRL gain over zero-shot " in out[-1] and "supervised-ICL gap " in out[-1]
