"""The episode viewer, opened in a real headless Chromium (selenium): what a person sees.

Skipped, with the reason, only where Chromium, chromedriver or selenium cannot be found
(CI installs them: apt-get install chromium chromium-driver; pip install -e .[dev]).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from icrl.records.summary import per_class_accuracy

from helpers import run_config

from icrl.records import find_runs, read_json, read_jsonl
from icrl.tasks import Example, Task
from icrl.cli.view import main

from icrl.analysis.synthetic import synthesize_run

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1600")
LABELS = ["apple", "banana", "cherry", "damson"]


def chromium_paths():
    browser = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    return browser, shutil.which("chromedriver")


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e .[dev])")
    from selenium.webdriver.chrome.service import Service

    browser, chromedriver = chromium_paths()
    if not browser or not chromedriver:
        pytest.skip("Chromium or chromedriver not found (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.binary_location = browser
    chrome = webdriver.Chrome(options=options, service=Service(chromedriver))
    yield chrome
    chrome.quit()


def toy_task() -> Task:
    train = [Example(i, f"question {i} token zq{i}x about {LABELS[i % 4]}", i % 4) for i in range(300)]
    test = [Example(i, f"test item {i} about {LABELS[(i * 7) % 4]}", (i * 7) % 4) for i in range(40)]
    return Task("toy", LABELS, "Input: {text}", "Label:", train, test)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A naive and an explorative run of 120 steps on the toy task (tests at 0, 39, 79, 119)."""
    root = tmp_path_factory.mktemp("viewer_runs")
    task = toy_task()
    synthesize_run(root, task, steps=120, strategy="random_biased_end", p_keep=1.0, max_examples=8, test_every=40,
                   test_k=20, p_correct=lambda t: max(0.1, 0.6 - t / 120))
    synthesize_run(root, task, steps=120, strategy="random_unbiased_only_positive", p_keep=0.1, max_examples=8,
                   test_every=40, test_k=20, p_correct=lambda t: 0.3 + t / 240)
    return root


def open_page(driver, path: Path, timeout: float = 20.0) -> float:
    """Open the file and wait until the viewer says it is ready; its ms since navigation."""
    driver.get(path.as_uri())
    deadline = time.time() + timeout
    while time.time() < deadline:
        ready = driver.execute_script("return window.viewerReadyMs || null")
        if ready is not None:
            return float(ready)
        time.sleep(0.05)
    raise AssertionError(f"the viewer did not become ready within {timeout} s: "
                         f"{driver.execute_script('return document.body.innerText.slice(0, 300)')}")


def go_to_step(driver, step: int) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.ID, "step-input")
    box.clear()
    box.send_keys(str(step), Keys.ENTER)


def column(driver, label_start: str):
    from selenium.webdriver.common.by import By

    columns = driver.find_elements(By.CSS_SELECTOR, "#columns .run-column")
    found = [c for c in columns if c.find_element(By.TAG_NAME, "h3").text.split(" · ")[0].startswith(label_start)]
    assert len(found) == 1, [c.find_element(By.TAG_NAME, "h3").text for c in columns]
    return found[0]


def run_records(root: Path, strategy: str):
    run_dir = next(d for d in find_runs(root) if f"/{strategy}/" in d.as_posix())
    return read_jsonl(run_dir / "train.jsonl"), read_jsonl(run_dir / "test.jsonl"), read_json(run_dir / "config.json")


def test_viewer_in_chromium(driver, runs, tmp_path):
    from selenium.webdriver.common.by import By

    page = tmp_path / "viewer.html"
    assert main([str(runs), "--out", str(page)]) == 0
    html = page.read_text()
    assert not re.search(r"<(script|link|img|iframe)[^>]*(src|href)=|url\(", html)
    open_page(driver, page)
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0  # nothing fetched
    assert driver.execute_script("return document.body.innerText").count("smollm2-135m / toy") >= 2

    # curves: seven charts, each run drawn as a line with points in the test accuracy chart
    charts = driver.find_elements(By.CSS_SELECTOR, "#charts .chart")
    assert len(charts) == 7
    lines = charts[0].find_elements(By.CSS_SELECTOR, "polyline.series")
    assert len(lines) == 2 and all(len(line.get_attribute("points").split()) == 4 for line in lines)
    assert charts[4].find_element(By.TAG_NAME, "h3").text.startswith("frequency bias")
    assert charts[5].find_element(By.TAG_NAME, "h3").text.startswith("history frequency bias")
    assert len(charts[6].find_elements(By.CSS_SELECTOR, "polyline.series")) == 2

    # the step browser at step 60: the naive run's input, prediction, reward and its 8 context episodes
    train, _, _ = run_records(runs, "random_biased_end")
    go_to_step(driver, 60)
    naive = column(driver, "naive")
    assert naive.find_element(By.CSS_SELECTOR, "pre.input").text == train[60]["prompt"]
    assert naive.find_element(By.CSS_SELECTOR, ".prediction").text == train[60]["prediction"]
    assert naive.find_element(By.CSS_SELECTOR, ".reward").text.endswith(str(train[60]["feedback"]))
    steps = [int(a.text) for a in naive.find_elements(By.CSS_SELECTOR, "table.context .steplink")]
    assert steps == train[60]["context"] == list(range(52, 60))
    first = naive.find_elements(By.CSS_SELECTOR, "table.context tbody tr")[0].find_elements(By.TAG_NAME, "td")
    assert first[1].text == train[52]["prompt"] and first[2].text == train[52]["prediction"]

    explorative_train, explorative_test, config = run_records(runs, "random_unbiased_only_positive")
    explorative = [int(a.text) for a in column(driver, "explorative").find_elements(By.CSS_SELECTOR, "table.context .steplink")]
    assert explorative == explorative_train[60]["context"]

    # a context episode's step link goes to that step
    naive.find_elements(By.CSS_SELECTOR, "table.context .steplink")[3].click()
    assert driver.find_element(By.ID, "step-input").get_attribute("value") == "55"
    assert column(driver, "naive").find_element(By.CSS_SELECTOR, "pre.input").text == train[55]["prompt"]

    # a test step: accuracy, per-class accuracy and the 20 test predictions
    driver.find_element(By.ID, "next-test").click()
    assert driver.find_element(By.ID, "step-input").get_attribute("value") == "79"
    record = next(r for r in explorative_test if r["step"] == 79)
    test = column(driver, "explorative").find_element(By.CSS_SELECTOR, ".test")
    assert f"accuracy {record['accuracy']:.3f} on 20 items" in test.find_element(By.TAG_NAME, "h4").text
    answers = config["test_set"]["answers"]
    per_class = {row.find_elements(By.TAG_NAME, "td")[0].get_attribute("textContent"):
                 float(row.find_elements(By.TAG_NAME, "td")[1].get_attribute("textContent"))
                 for row in test.find_elements(By.CSS_SELECTOR, "table.per-class tbody tr")}
    expected = {label: sum(p == a for p, a in zip(record["predictions"], answers) if a == label) / answers.count(label)
                for label in set(answers)}
    assert per_class == pytest.approx(expected, abs=0.0005)
    assert len(test.find_elements(By.CSS_SELECTOR, ".test-predictions tbody tr")) == 20

    # search: a word of one step's input finds that step in both runs; clicking a hit goes there
    search = driver.find_element(By.ID, "search")
    search.send_keys(explorative_train[97]["prompt"].split()[4])  # "zq<id>x", unique to that example
    time.sleep(0.5)
    hits = driver.find_elements(By.CSS_SELECTOR, "#search-results .hit")
    assert [h.get_attribute("data-step") for h in hits] == ["97", "97"]
    assert "2 matching steps" in driver.find_element(By.CSS_SELECTOR, "#search-results .count").text
    hits[0].click()
    assert driver.find_element(By.ID, "step-input").get_attribute("value") == "97"
    assert column(driver, "explorative").find_element(By.CSS_SELECTOR, "pre.input").text == explorative_train[97]["prompt"]
    search.clear()
    search.send_keys("no such words anywhere")
    time.sleep(0.5)
    assert "0 matching steps" in driver.find_element(By.CSS_SELECTOR, "#search-results .count").text

    # one run only: unticking a run removes its column
    driver.find_element(By.CSS_SELECTOR, "#runs input[data-run='0']").click()
    assert len(driver.find_elements(By.CSS_SELECTOR, "#columns .run-column")) == 1
    driver.find_element(By.CSS_SELECTOR, "#runs input[data-run='0']").click()
    go_to_step(driver, 60)
    assert driver.save_screenshot(str(tmp_path / "viewer.png"))
    assert (tmp_path / "viewer.png").stat().st_size > 20_000
    assert driver.get_log("browser") == []


def test_a_zero_shot_run_is_a_reference_line_across_the_accuracy_charts(driver, tmp_path):
    """A zero-shot run has one test and no training step: drawn as a dashed line over the whole
    step axis of the test-accuracy chart, not as a dot at step 0, and on no training chart (it
    never trained)."""
    from selenium.webdriver.common.by import By

    from helpers import TOY
    from icrl.cli.run import main as run

    out = tmp_path / "runs"
    common = [*TOY, "--test_k", "12", "--output_dir", str(out)]
    assert run([*common, "--max_context_examples", "0", "--icrl"]) == 0
    assert run([*common, "--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.5",
                "--icrl", "--train_k", "40", "--test_every", "20", "--max_context_examples", "4"]) == 0
    page = tmp_path / "viewer.html"
    assert main([str(out), "--out", str(page)]) == 0
    open_page(driver, page)
    charts = driver.find_elements(By.CSS_SELECTOR, "#charts .chart")
    [line] = charts[0].find_elements(By.CSS_SELECTOR, "polyline.series.reference")  # test accuracy
    xs = [float(p.split(",")[0]) for p in line.get_attribute("points").split()]
    ys = {p.split(",")[1] for p in line.get_attribute("points").split()}
    assert len(ys) == 1 and xs[0] < 50 and xs[-1] > 300, line.get_attribute("points")  # the chart's width
    for chart in charts[1:3]:  # training accuracy, reward rate: no zero-shot line
        assert chart.find_elements(By.CSS_SELECTOR, "polyline.series.reference") == []
    assert len(charts[0].find_elements(By.CSS_SELECTOR, "polyline.series:not(.reference)")) == 1


def write_long_run(root: Path, steps: int = 10_000, window: int = 40, test_k: int = 500, every: int = 500) -> Path:
    """A naive-ICRL-shaped run of ``steps`` steps in the records' format, written directly
    (synthesize_run's strategy replay is slow at this length)."""
    import random

    rng = random.Random(0)
    labels = [f"intent_{i}" for i in range(77)]
    run_dir = root / "m" / "t" / str(window) / "True" / "random_biased_end" / "1.0" / "False" / "False" / "1.0" / "1" / "run"
    run_dir.mkdir(parents=True)
    test_steps = sorted({0, steps - 1} | {t for t in range(steps) if (t + 1) % every == 0})
    test_answers = [labels[i % 77] for i in range(test_k)]
    config = run_config(steps, labels=labels, test_answers=test_answers, test_every=every, size=window,
                        args={"context_strategy_name": "random_biased_end", "context_p_keep": 1.0})
    config["test_set"]["prompts"] = [f"Query: test question number {i} about {a}, in a sentence of usual length"
                                     for i, a in enumerate(test_answers)]
    (run_dir / "config.json").write_text(json.dumps(config))
    with open(run_dir / "train.jsonl", "w") as f:
        for t in range(steps):
            answer = labels[rng.randrange(77)]
            prediction = answer if rng.random() < 0.4 else labels[rng.randrange(77)]
            f.write(json.dumps({"step": t, "example_id": t, "prompt": f"Query: training question {t} "
                                f"{'about something ' * rng.randrange(2, 8)}{answer}?", "prediction": prediction,
                                "feedback": int(prediction == answer), "answer": answer,
                                "accuracy": int(prediction == answer), "context_size": min(t, window),
                                "context": list(range(max(0, t - window), t)), "metrics": {}}) + "\n")
    with open(run_dir / "test.jsonl", "w") as f:
        for t in test_steps:
            predictions = [a if rng.random() < 0.4 else labels[0] for a in test_answers]
            correct = [int(p == a) for p, a in zip(predictions, test_answers)]
            f.write(json.dumps({"step": t, "accuracy": sum(correct) / test_k,
                                "per_class_accuracy": per_class_accuracy(test_answers, correct),
                                "predictions": predictions, "context_size": min(t, window),
                                "context": list(range(max(0, t - window), t))}) + "\n")
    return root


def test_ten_thousand_steps_stay_usable(driver, tmp_path):
    from selenium.webdriver.common.by import By

    root = write_long_run(tmp_path / "data")
    page = tmp_path / "long.html"
    assert main([str(root), "--out", str(page)]) == 0
    size_mb = page.stat().st_size / 1e6
    ready_ms = open_page(driver, page)
    print(f"10,000 steps: {size_mb:.2f} MB, ready {ready_ms:.0f} ms after navigation")
    assert size_mb <= 10 and ready_ms < 2000
    go_to_step(driver, 9999)
    col = driver.find_element(By.CSS_SELECTOR, "#columns .run-column")
    assert "Step 9999 of 10000" in col.text and "Test at step 9999" in col.text
    assert len(col.find_elements(By.CSS_SELECTOR, "table.context .steplink")) == 40


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not a readable folder" in err[0] and "no runs under" in err[1]
    assert not (tmp_path / "viewer.html").exists()


def test_unwritable_out_is_one_line_exit_2(runs, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main([str(runs), "--out", str(tmp_path / "file" / "viewer.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write" in err[0] and "--out" in err[0]


def test_context_code_round_trips():
    import random

    from icrl.viewer.data import decode_context, encode_context

    assert encode_context([0, 1, 2, 3]) == "103"  # step 0 (gap 1 from -1), then a run of 3 more
    assert len(encode_context(range(5000, 9000))) == 7  # a 4000-episode window: 3 + 1 + 3 characters
    rng = random.Random(0)
    for _ in range(500):
        ids = sorted(rng.sample(range(20_000), rng.randrange(0, 60)))
        if rng.random() < 0.2:
            rng.shuffle(ids)
        assert decode_context(encode_context(ids)) == ids


def test_each_test_input_shows_its_own_retrieved_context(driver, data_dir, tmp_path):
    """A knn run: the test predictions list, per input, the training steps of its own context, and
    a click on one goes to that step."""
    from selenium.webdriver.common.by import By

    from icrl.cli.run import main as run

    data = tmp_path / "data"
    assert run(["--backend", "fake", "--model_name", "fake", "--task_name", "trec_coarse", "--icrl",
                "--context_strategy_name", "knn_lexical_only_positive", "--max_context_examples", "3",
                "--train_k", "30", "--test_every", "15", "--test_k", "6", "--seed", "1", "--training_seed", "1",
                "--test_seed", "1", "--no-progress", "--output_dir", str(data)]) == 0
    _, test, _ = run_records(data, "knn_lexical_only_positive")
    last = test[-1]
    assert last["step"] == 29 and any(last["contexts"]) and len(set(map(tuple, last["contexts"]))) > 1
    page = tmp_path / "viewer.html"
    assert main([str(data), "--out", str(page)]) == 0
    open_page(driver, page)
    go_to_step(driver, 29)
    block = driver.find_element(By.CSS_SELECTOR, "#columns .run-column .test")
    block.find_element(By.TAG_NAME, "summary").click()
    assert block.find_elements(By.TAG_NAME, "th")[-1].text == "its context (steps)"
    rows = block.find_elements(By.CSS_SELECTOR, "details tbody tr")
    shown = [[int(a.get_attribute("textContent")) for a in row.find_elements(By.CSS_SELECTOR, "td.own-context .steplink")]
             for row in rows]
    assert shown == last["contexts"]
    k, j = next((k, c[0]) for k, c in enumerate(shown) if c)
    rows[k].find_elements(By.CSS_SELECTOR, "td.own-context .steplink")[0].click()
    assert driver.find_element(By.ID, "step-input").get_attribute("value") == str(j)


def test_reasoning_guides_verdicts_pruning_and_failure_metrics_are_shown(driver, tmp_path):
    """A reasoning run judged by its own model, a reflection run and a curated retrieval run: the
    step shows the reasoning before the answer (and each test answer's), the guide in the prompt,
    the judge's verdict and the episodes pruned; each run's failure metrics stand under its name."""
    from selenium.webdriver.common.by import By

    from helpers import TOY
    from icrl.analysis.failures import run_failures
    from icrl.cli.run import main as run
    from icrl.records.schema import TrainLine

    data = tmp_path / "data"
    common = [*TOY, "--icrl", "--max_context_examples", "3", "--train_k", "24", "--test_every", "12", "--test_k", "3",
              "--no-progress", "--output_dir", str(data)]
    assert run([*common, "--context_strategy_name", "random_unbiased", "--reasoning", "10", "--reward", "judge"]) == 0
    assert run([*common, "--context_strategy_name", "reflection", "--reflect_every", "5"]) == 0
    assert run([*common, "--context_strategy_name", "knn_lexical_curated", "--curate_min_uses", "1"]) == 0
    page = tmp_path / "viewer.html"
    assert main([str(data), "--out", str(page)]) == 0
    open_page(driver, page)
    for i in range(len(driver.find_elements(By.CSS_SELECTOR, "#runs input"))):
        box = driver.find_elements(By.CSS_SELECTOR, "#runs input")[i]  # each click draws the columns anew
        if not box.is_selected():
            box.click()
    reasoned, reasoned_test, _ = run_records(data, "random_unbiased")
    reflected, _, _ = run_records(data, "reflection")
    curated, _, _ = run_records(data, "knn_lexical_curated")
    pruned_at = next(r["step"] for r in curated if r["metrics"]["pruned"])
    go_to_step(driver, 11)
    columns = driver.find_elements(By.CSS_SELECTOR, "#columns .run-column")
    by_strategy = {}
    for col in columns:
        run_id = col.find_element(By.CSS_SELECTOR, ".run-id").text
        by_strategy[next(s for s in ("random_unbiased", "reflection", "knn_lexical_curated") if f"/{s}/" in run_id)] = col
    col = by_strategy["random_unbiased"]
    assert col.find_element(By.CSS_SELECTOR, ".reasoning pre").text == reasoned[11]["reasoning"]
    assert f"({reasoned[11]['reasoning_tokens']} tokens)" in col.find_element(By.CSS_SELECTOR, ".reasoning summary").text
    assert col.find_element(By.CSS_SELECTOR, ".judge b").text == reasoned[11]["judge"]
    test = col.find_element(By.CSS_SELECTOR, ".test")
    test.find_element(By.CSS_SELECTOR, ".test-predictions summary").click()
    cells = [c.get_attribute("textContent") for c in test.find_elements(By.CSS_SELECTOR, "td.test-reasoning")]
    assert cells == next(r for r in reasoned_test if r["step"] == 11)["reasoning"]
    guide = by_strategy["reflection"].find_element(By.CSS_SELECTOR, ".guide")
    assert "written at step 10" in guide.find_element(By.TAG_NAME, "summary").text
    assert guide.find_element(By.TAG_NAME, "pre").text == reflected[10]["reflection"].strip()
    failures = run_failures([TrainLine.from_json(r) for r in reasoned], ["billing", "refund", "delivery", "account"])
    line = by_strategy["random_unbiased"].find_element(By.CSS_SELECTOR, ".failures").text
    assert f"labels never predicted: {failures['greediness']:.3f}" in line
    assert f"knowing-doing gap: {failures['knowing_doing_gap']:.3f}" in line
    go_to_step(driver, pruned_at)
    col = next(c for c in driver.find_elements(By.CSS_SELECTOR, "#columns .run-column")
               if "/knn_lexical_curated/" in c.find_element(By.CSS_SELECTOR, ".run-id").text)
    shown = [int(a.text) for a in col.find_elements(By.CSS_SELECTOR, ".pruned .steplink")]
    assert shown == curated[pruned_at]["metrics"]["pruned"]
    assert driver.get_log("browser") == []
