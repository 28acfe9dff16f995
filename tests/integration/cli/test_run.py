"""Running a study: --help texts, checks before any data or model loads,
Hub failures as one line, script-based Hub datasets read from their parquet conversion, and
progress inside a test step."""

from __future__ import annotations

import re
import time

import pytest

from icrl.errors import UsageError
from icrl.cli.run import main
from icrl.tasks import sources

ARGS = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased_only_positive",
        "--context_p_keep", "0.5", "--max_context_examples", "2", "--train_k", "3", "--test_every", "3",
        "--test_k", "5", "--temperature", "1.0", "--backend", "transformers", "--batch_size", "2",
        "--icrl", "--seed", "100", "--training_seed", "100", "--test_seed", "100"]


# -- --help ----------------------------------------------------------------------------------------
def _parsers():
    from icrl import cli
    from icrl.cli import window as maxlen
    from icrl.cli import figures as plots, tokens as token_count
    from icrl.cli import sweep as sweep_cli

    return {"run_experiment.py": cli.build_parser(), "find_max_examples_given_max_window.py": maxlen.build_parser(),
            "run_count_tokens.py": token_count.build_parser(), "run_draw_plots.py": plots.build_parser(),
            "run_sweep.py": sweep_cli.build_parser()}


def option_helps(text: str) -> dict:
    """{option column: its help text, joined} for every option listed in argparse help output."""
    entries, current = {}, None
    for line in text.splitlines():
        if line.startswith("  -"):  # a new option: '  --flag METAVAR   help...' or help on the next line
            head, _, rest = line.strip().partition("  ")
            current = head
            entries[current] = rest.strip()
        elif current is not None and line.startswith("    ") and line.strip():
            entries[current] = (entries[current] + " " + line.strip()).strip()
        else:
            current = None
    return entries


@pytest.mark.parametrize("script", ["run_experiment.py", "find_max_examples_given_max_window.py",
                                    "run_count_tokens.py", "run_draw_plots.py", "run_sweep.py"])
def test_help_gives_every_option_a_text_and_its_default_once(script, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    parser = _parsers()[script]
    text = parser.format_help()
    assert "%%" not in text and "%(" not in text
    helps = option_helps(text)
    assert len(helps) == sum(1 for action in parser._actions if action.option_strings)
    for option, help_text in helps.items():
        if option.startswith("-h"):
            continue
        assert help_text, f"{script} {option}: no help text"
        lowered = help_text.lower()
        assert "default" in lowered or "required" in lowered, f"{script} {option}: no default shown: {help_text}"
        assert "(default: none)" not in lowered or lowered.count("default") == 1, f"{script} {option}: {help_text}"
        appended = re.search(r"\(default: [^()]*\)$", help_text)
        if appended:  # the formatter's suffix: only when the text did not already say it
            assert "default" not in help_text[:appended.start()].lower(), f"{script} {option}: default twice"


def test_help_parser_reads_wrapped_entries():
    text = ("options:\n  -h, --help  show this\n  --device DEVICE       cpu or cuda (default:\n"
            "                        cuda if visible)\n  --verbose\n\nother:\n  --x X  y (default: 1)\n")
    assert option_helps(text) == {"-h, --help": "show this", "--device DEVICE": "cpu or cuda (default: cuda if visible)",
                                  "--verbose": "", "--x X": "y (default: 1)"}


# -- cheap checks first ----------------------------------------------------------------------------
@pytest.fixture
def no_data(tmp_path, monkeypatch):
    """No dataset anywhere: a check that runs after the data load would report the data instead."""
    monkeypatch.setenv("ICRL_DATA_DIR", str(tmp_path / "no_data_here"))
    return tmp_path


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_cuda_device_without_a_gpu_is_refused_before_the_data_load(no_data, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    for device in ("cuda", "cuda:1"):
        assert main([*ARGS, "--output_dir", str(no_data / "out"), "--device", device]) == 2
        err = _error(capsys)
        assert "no CUDA GPU is visible" in err and "dataset" not in err
    assert not (no_data / "out").exists()


@pytest.mark.parametrize("name, needle", [
    ("no-such-model", "unknown --model_name"),          # no org/
    ("org--x/y", "unknown --model_name"),                # not a possible Hub id
    ("someorg/not-in-the-cache", "not available offline"),
])
def test_model_name_that_cannot_load_is_refused_before_the_data_load(no_data, capsys, monkeypatch, name, needle):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(no_data / "hf_cache"))
    assert main([*ARGS, "--output_dir", str(no_data / "out"), "--model_name", name]) == 2
    err = _error(capsys)
    assert needle in err and "dataset" not in err


def test_model_cached_offline_passes_the_check(tmp_path, monkeypatch):
    from icrl.cli import validate_model_path

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    (tmp_path / "models--someorg--cached" / "snapshots" / "abc123").mkdir(parents=True)
    validate_model_path("someorg/cached")
    with pytest.raises(UsageError, match="not available offline"):
        validate_model_path("someorg/other")


@pytest.fixture
def hub_unreachable(monkeypatch):
    """Online mode, but the Hub endpoint refuses connections (a closed local port)."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")


def test_unreachable_hub_is_one_line_at_once_for_data_and_model(hub_unreachable, tmp_path, capsys, monkeypatch):
    from icrl.cli import validate_model_path

    sources.load_source.cache_clear()
    tic = time.perf_counter()
    with pytest.raises(UsageError) as info:
        sources.load_source("trec", None)
    message = str(info.value)
    assert "unreachable" in message and "ICRL_DATA_DIR" in message and "\n" not in message
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UsageError, match="cannot download --model_name 'someorg/m'.*unreachable"):
        validate_model_path("someorg/m")
    assert time.perf_counter() - tic < 10  # no retries with backoff
    assert "Retrying" not in capsys.readouterr().err


# -- Hub datasets whose loading script datasets >= 4 refuses ----------------------------------------
def _parquet_export(columns_by_split: dict, source: str, folder) -> None:
    """A local copy laid out like the Hub's refs/convert/parquet: <config>/<split>/0000.parquet."""
    import datasets

    spec = sources.SOURCES[source]
    for split, columns in columns_by_split.items():
        features = datasets.Features({"text": datasets.Value("string"), **{
            c: datasets.ClassLabel(names=list(sources.hf_label_names(source, c))) for c in spec.label_columns}})
        target = folder / (spec.hub_config or "default") / split
        target.mkdir(parents=True)
        data = {c: list(columns[c]) for c in ("text",) + spec.label_columns}
        datasets.Dataset.from_dict(data, features=features).to_parquet(str(target / "0000.parquet"))


@pytest.mark.parametrize("source", ["trec", "clinc_oos"])
def test_script_dataset_is_read_from_the_parquet_conversion(source, data_dir, tmp_path, monkeypatch):
    import datasets

    expected = sources.SOURCES[source].parse(data_dir)
    export = tmp_path / "export"
    _parquet_export(expected, source, export)
    hub_id = sources.SOURCES[source].hub_id
    real = datasets.load_dataset
    calls = []

    def hub(path, *args, **kwargs):
        calls.append(path)
        if path == hub_id:  # what datasets >= 4 says about a script-based Hub dataset
            raise RuntimeError(f"Dataset scripts are no longer supported, but found {source}.py")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", hub)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    monkeypatch.setattr(sources, "parquet_export", lambda hub: str(export))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sources.load_source.cache_clear()
    try:
        got = sources.load_source(source, None)
    finally:
        sources.load_source.cache_clear()
    assert calls == [hub_id, "parquet"]
    assert got == expected


def test_parquet_export_url_is_the_convert_revision():
    assert sources.parquet_export("CogComp/trec") == "hf://datasets/CogComp/trec@refs%2Fconvert%2Fparquet"


def test_other_hub_failures_are_not_retried_as_parquet(monkeypatch):
    import datasets

    calls = []

    def hub(path, *args, **kwargs):
        calls.append(path)
        raise ConnectionError("Couldn't reach 'CogComp/trec' on the Hub\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", hub)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sources.load_source.cache_clear()
    with pytest.raises(UsageError, match="Couldn't reach") as info:
        sources.load_source("trec", None)
    assert calls == ["CogComp/trec"] and "\n" not in str(info.value)


# -- progress inside a test step -------------------------------------------------------------------
@pytest.mark.model
def test_transformers_backend_reports_each_batch(smollm2):
    prompts = [smollm2.render([{"role": "user", "content": f"Question: what is {i}?"}], "Type:") for i in range(5)]
    import torch

    seen = []
    batch_size, threads = smollm2.batch_size, torch.get_num_threads()
    smollm2.batch_size = 2
    torch.set_num_threads(1)
    try:
        out = smollm2.predict(prompts, ["human", "location"], 0.0, 0, progress=seen.append)
    finally:
        smollm2.batch_size = batch_size
        torch.set_num_threads(threads)
    assert len(out) == 5 and seen == [2, 2, 1]


@pytest.mark.model
def test_test_step_shows_its_progress_unless_no_progress(tmp_path, data_dir, smollm2, monkeypatch, capsys):
    import icrl.backends

    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    import torch

    monkeypatch.setattr(icrl.backends, "load_backend", lambda *a, **k: smollm2)
    batch_size, threads = smollm2.batch_size, torch.get_num_threads()
    smollm2.batch_size = 2
    torch.set_num_threads(1)  # tiny passes: a second spinning thread only slows a busy machine
    one_step = [*ARGS, "--train_k", "1"]  # one step, one test step of 5 prompts in 3 batches
    try:
        assert main([*one_step, "--output_dir", str(tmp_path / "a")]) == 0
        shown = capsys.readouterr().err
        assert main([*one_step, "--output_dir", str(tmp_path / "b"), "--no-progress"]) == 0
        quiet = capsys.readouterr().err
    finally:
        smollm2.batch_size = batch_size
        torch.set_num_threads(threads)
    for done in ("0/5", "2/5", "4/5", "5/5"):
        assert f"testing {done}" in shown
    assert "testing" not in quiet and "step/s" not in quiet and "s/step" not in quiet
