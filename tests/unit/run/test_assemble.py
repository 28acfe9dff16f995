"""The composition root (icrl.run.assemble): every model call a run's parts declare is answered
by the model the caller plugs in for it, and a run assembled with stand-ins writes nothing.
On the fake backend and the toy task."""

from __future__ import annotations

from helpers import TOY_TASK
from icrl.backends.fake import FakeBackend
from icrl.cli import parse_args
from icrl.method.calls import ANSWER, TEST_ANSWER
from icrl.method.rewards import VERDICT
from icrl.method.strategies.reflection import GUIDE
from icrl.run.assemble import MemoryRecords, all_calls, assemble, by_option, calls_of, plan_of
from icrl.run.data import load_data

BASE = ["--backend", "fake", "--model_name", "fake", "--task_name", TOY_TASK, "--train_k", "9",
        "--test_every", "4", "--test_k", "3", "--seed", "100", "--training_seed", "100", "--test_seed", "100",
        "--max_context_examples", "3", "--icrl", "--no-progress"]
REFLECTING_AND_JUDGED = ["--context_strategy_name", "reflection", "--reflect_every", "3", "--reward", "judge"]


class Counting(FakeBackend):
    """The fake model, counting the calls it answers."""

    def __init__(self, name: str):
        super().__init__(name)
        self.predicted = self.generated = 0

    def predict(self, prompts, labels, temperature, seed, progress=None):
        self.predicted += len(prompts)
        return super().predict(prompts, labels, temperature, seed)

    def generate(self, prompts, max_tokens, temperature, seed, stop=()):
        self.generated += len(prompts)
        return super().generate(prompts, max_tokens, temperature, seed, stop=stop)


def _run(tmp_path, *extra):
    config = parse_args([*BASE, *REFLECTING_AND_JUDGED, "--output_dir", str(tmp_path), *extra])
    data = load_data(config, say_warnings=False)
    return config, data, plan_of(config, data, 3)


def test_each_declared_call_is_answered_by_the_model_plugged_in_for_it(tmp_path):
    config, data, plan = _run(tmp_path)
    models = {call: Counting(call.kind) for call in (ANSWER, TEST_ANSWER, GUIDE, VERDICT)}
    records = MemoryRecords()
    assemble(config, data, plan, models.__getitem__, records).loop.run(0)
    steps, tests = plan.steps, len(plan.test_steps)
    assert models[ANSWER].predicted == steps  # one label a training step
    assert models[TEST_ANSWER].predicted == tests * len(data.test)
    assert models[VERDICT].predicted == steps  # one verdict a training step
    assert models[GUIDE].generated == len([t for t in range(steps) if t and t % 3 == 0])  # guides at 3, 6
    assert [r.step for r in records.train if GUIDE.answered(r)] == [3, 6]
    assert all(r.answers[VERDICT.field] in ("yes", "no") for r in records.train)
    assert not any(tmp_path.iterdir()), "an assembled run with memory records writes nothing"


def test_models_by_option_load_the_named_models_once_each_and_the_acting_one_otherwise(tmp_path):
    config, _, _ = _run(tmp_path, "--judge_model", "judge-m", "--reflection_model", "writer-m")
    acting, loaded = object(), []

    def load(name):
        loaded.append(name)
        return name

    models = by_option(config, acting, load)
    assert [models(call) for call in (ANSWER, TEST_ANSWER, GUIDE, VERDICT)] == [acting, acting, "writer-m", "judge-m"]
    assert calls_of(config) == [GUIDE, VERDICT]  # the strategy's, then the reward's: the loading order
    assert {GUIDE, VERDICT} <= set(all_calls())


def test_a_run_without_model_calls_of_its_parts_declares_none(tmp_path):
    config = parse_args([*BASE, "--context_strategy_name", "random_unbiased", "--output_dir", str(tmp_path)])
    assert calls_of(config) == []
