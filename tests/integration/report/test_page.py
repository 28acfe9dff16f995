"""The study report (run_report.py), opened in a real headless Chromium (selenium): what a person
reads. Skipped, with the reason, only where Chromium, chromedriver or selenium cannot be found
(apt-get install chromium chromium-driver; pip install -e .[dev])."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from helpers import TOY, chromium_driver
from icrl.analysis.results import Results
from icrl.cli.report import main
from icrl.cli.run import main as run

SEEDS = (1, 2)
METHODS = {  # configuration -> its flags (fake backend, toy task, 12 test items)
    "zero-shot": ["--max_context_examples", "0", "--icrl"],
    "naive": ["--context_strategy_name", "random_biased_end", "--icrl", "--max_context_examples", "4"],
    "explorative": ["--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.1", "--icrl",
                    "--max_context_examples", "4"],
    "knn": ["--context_strategy_name", "knn_lexical_only_positive", "--icrl", "--max_context_examples", "4"],
    "ICL": ["--context_strategy_name", "random_unbiased", "--no-icrl", "--max_context_examples", "4"],
}


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    chrome = chromium_driver(tmp_path_factory.mktemp("chromium-profile"), window="1500,1700")
    yield chrome
    chrome.quit()


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """Five configurations x two seeds of fake-backend runs on the toy task, 30 steps, one test set."""
    out = tmp_path_factory.mktemp("study")
    for seed in SEEDS:
        for name, flags in METHODS.items():
            steps = [] if name == "zero-shot" else ["--train_k", "30", "--test_every", "10"]
            assert run([*TOY[:-6], "--seed", str(seed), "--training_seed", str(seed), "--test_seed", "100",
                        "--test_k", "12", *steps, *flags, "--output_dir", str(out)]) == 0
    return out


def open_report(driver, path: Path, timeout: float = 20.0) -> float:
    driver.get(path.as_uri())
    deadline = time.time() + timeout
    while time.time() < deadline:
        ready = driver.execute_script("return window.reportReadyMs || null")
        if ready is not None:
            return float(ready)
        time.sleep(0.05)
    raise AssertionError(f"the report did not become ready: {driver.execute_script('return document.body.innerText')[:300]}")


def rows(driver):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, "#configs tbody tr")


def column_texts(driver, key: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [r.find_element(By.CSS_SELECTOR, f"td.c-{key}").text for r in rows(driver)]


def test_the_report_in_chromium(driver, study, tmp_path, capsys):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page = tmp_path / "report.html"
    assert main([str(study), "--out", str(page)]) == 0
    assert "10 runs in 5 configurations" in capsys.readouterr().out
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img|iframe)[^>]*(src|href)=|url\(", html)  # self-contained
    open_report(driver, page)
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0  # nothing fetched

    # every configuration a row, every run a link to its own episode viewer page
    assert len(rows(driver)) == 5
    links = driver.find_elements(By.CSS_SELECTOR, "#configs a.run")
    assert len(links) == 10 and {a.text for a in links} == {"s1", "s2"}
    for link in links:
        target = (page.parent / link.get_attribute("href").split(page.parent.as_uri() + "/", 1)[1])
        assert target.is_file() and target.name == "viewer.html"

    # the paired verdict against zero-shot is the one Results.compare gives (seeds pooled, same seeds paired)
    results = Results(study)
    runs = results.runs
    knn = runs[runs["strategy"] == "knn_lexical_only_positive"].sort_values("seed")
    zero = runs[runs["mode"] == "zero_shot"].sort_values("seed")
    import numpy as np
    from icrl.analysis.stats import compare_paired, paired_outcomes

    pairs = [paired_outcomes(a, b) for a, b in zip(knn["run_dir"], zero["run_dir"])]
    c = compare_paired(np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs]))
    knn_row = next(r for r in rows(driver) if "knn_lexical" in r.text)
    assert f"{c.difference.estimate:+.3f} [{c.difference.low:+.3f}, {c.difference.high:+.3f}]" in \
        knn_row.find_element(By.CSS_SELECTOR, "td.c-vs_zero").text
    final = knn["final_test_accuracy"]
    assert knn_row.find_element(By.CSS_SELECTOR, "td.c-final").text.startswith(f"{final.mean():.3f} [")
    assert "explorative:" in knn_row.find_element(By.CSS_SELECTOR, "td.c-vs_paper").text  # against a paper method

    # sorting by final test accuracy, both ways
    header = driver.find_element(By.CSS_SELECTOR, "th[data-key='final']")
    header.click()
    values = [float(t.split()[0]) for t in column_texts(driver, "final")]
    assert values == sorted(values)
    driver.find_element(By.CSS_SELECTOR, "th[data-key='final']").click()
    values = [float(t.split()[0]) for t in column_texts(driver, "final")]
    assert values == sorted(values, reverse=True)

    # curves: a panel for the toy task, one line per configuration with a curve, zero-shot as a reference line
    [panel] = driver.find_elements(By.CSS_SELECTOR, ".panel")
    test_chart, diagnostic_chart = panel.find_elements(By.CSS_SELECTOR, ".chart")
    assert len(test_chart.find_elements(By.CSS_SELECTOR, "polyline.series")) == 4
    zero_mean = zero["final_test_accuracy"].mean()
    assert f"zero-shot (2 runs) {zero_mean:.3f}" in test_chart.text
    assert len(test_chart.find_elements(By.CSS_SELECTOR, "line.ref.zero")) == 1
    assert diagnostic_chart.find_elements(By.CSS_SELECTOR, "line.ref.zero") == []  # training: zero-shot never trained
    assert len(diagnostic_chart.find_elements(By.CSS_SELECTOR, "polyline.series")) == 3  # the ICRL ones
    driver.save_screenshot(str(tmp_path / "report.png"))

    # filtering: a word keeps its rows and their curves only
    box = driver.find_element(By.ID, "filter-text")
    box.send_keys("knn")
    assert len(rows(driver)) == 1 and "1 of 5 configurations shown" in driver.find_element(By.ID, "shown").text
    test_chart = driver.find_element(By.CSS_SELECTOR, ".panel .chart")
    assert len(test_chart.find_elements(By.CSS_SELECTOR, "polyline.series")) == 1
    box.clear()
    box.send_keys(" ")  # an input event with an empty filter
    box.clear()
    Select(driver.find_element(By.ID, "filter-method")).select_by_visible_text("zero-shot")
    assert len(rows(driver)) == 1 and "zero-shot" in rows(driver)[0].text
    Select(driver.find_element(By.ID, "diagnostic")).select_by_value("entropy_norm")
    assert driver.get_log("browser") == []


def test_a_study_of_120_runs_is_written_and_ready_quickly(driver, tmp_path, capsys):
    """Synthetic records (no model): 12 configurations x 10 seeds of 200 steps."""
    from selenium.webdriver.common.by import By

    from icrl.analysis.synthetic import synthesize_run
    from icrl.tasks import Example, Task

    labels = ["apple", "banana", "cherry", "damson"]
    task = Task("toy", labels, "Input: {text}", "Label:",
                [Example(i, f"question {i} token zq{i}x about {labels[i % 4]}", i % 4) for i in range(300)],
                [Example(i, f"test item {i} about {labels[(i * 7) % 4]}", (i * 7) % 4) for i in range(40)])
    for strategy in ("random_biased_end", "random_unbiased_only_positive", "random_biased_end_only_positive"):
        for p_keep in (0.1, 0.5, 1.0, 0.3):
            for seed in range(10):
                synthesize_run(tmp_path / "runs", task, steps=200, strategy=strategy, p_keep=p_keep, max_examples=8,
                               test_every=50, test_k=40, seed=seed, training_seed=seed,
                               p_correct=lambda t, p=p_keep: 0.2 + p * t / 400)
    page = tmp_path / "report.html"
    tic = time.perf_counter()
    assert main([str(tmp_path / "runs"), "--out", str(page)]) == 0
    written = time.perf_counter() - tic
    ready = open_report(driver, page)
    assert len(rows(driver)) == 12 and len(driver.find_elements(By.CSS_SELECTOR, "#configs a.run")) == 120
    print(f"120 runs: written in {written:.1f} s with their viewer pages, {page.stat().st_size / 1e3:.0f} KB, "
          f"ready {ready:.0f} ms after navigation")
    assert ready < 5000 and written < 300


def test_a_leaderboard_when_several_models_ran_the_benchmark(driver, data_dir, tmp_path, capsys):
    """The icrl_bench suite (tiny, fake backend) for two models: one leaderboard row each, with the
    score and interval icrl.analysis.benchmark gives, best first."""
    from selenium.webdriver.common.by import By

    from icrl.analysis.benchmark import bench_scores
    from icrl.sweep.runner import main as sweep

    out = tmp_path / "bench"
    for model in ("model-a", "model-b"):
        assert sweep(["--preset", "icrl_bench", "--backend", "fake", "--model_name", model, "--train_k", "6",
                      "--test_every", "3", "--test_k", "8", "--output_dir", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    page = tmp_path / "report.html"
    assert main([str(out), "--out", str(page), "--no-viewers"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("benchmark score: ")]
    scores = bench_scores(Results(out))
    assert sorted(s.model for s in scores) == ["model-a (fake)", "model-b (fake)"]  # the fake backend named
    assert printed == [f"benchmark score: {s.line()}" for s in scores]
    open_report(driver, page)
    table = driver.find_element(By.ID, "leaderboard-table")
    shown = table.find_elements(By.CSS_SELECTOR, "tbody > tr")
    assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in shown] == [s.model for s in scores]
    for row, score in zip(shown, scores):  # a score and its rank, or in the rank column why there is none
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        if score.no_score:
            assert cells[0] == score.no_score and cells[2] == "none"
        else:
            assert cells[2].startswith(score.score_text)
