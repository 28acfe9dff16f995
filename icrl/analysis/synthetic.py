"""Records of finished ICRL and ICL runs written without a model (for benchmarks and tests).

This is a second copy of the experiment loop's order of events (context, training call, test
step, records), with predictions drawn to be right with a given probability (which no backend
offers) and no timings: records of long runs in milliseconds, for the token-count benchmark and
the tests of the figures and the viewer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

import numpy as np

from ..method.episode import Episode
from ..records.schema import TestLine, TrainLine
from ..records.summary import per_class_accuracy

if TYPE_CHECKING:
    from ..method.strategies.base import Strategy
    from ..tasks import Example, Task


def synthesize_run(out_dir: Union[str, Path], task: Task, *, steps: int,
                   strategy: str = "random_unbiased_only_positive", p_keep: float = 0.1, max_examples: int = 40,
                   max_contexts: int = 8, sampling_method: str = "uniform", test_every: int = 500, test_k: int = 500,
                   model_name: str = "smollm2-135m", p_correct: Union[float, Callable[[int], float]] = 0.6,
                   seed: int = 100, **extra_args: Any) -> Path:
    """Write the records of a finished ICRL run (``icrl=False`` in ``extra_args``: a supervised
    ICL run) without a model, in the experiment's format.

    Training examples and test prompts are ``task``'s (a loaded icrl.tasks.Task); predictions
    are right with probability ``p_correct`` (a number, or a function of the step; else a
    random label); contexts come from the real strategy code, as in a live run.
    ``extra_args`` override entries of the recorded arguments. Returns the run directory.
    """
    from ..config import SPEC_DEFAULTS, RunConfig
    from ..method.strategies import make_strategy, strategy_of
    from ..records import RunRecords, experiment_dir
    from ..records.plan import Plan, plan_steps
    from ..run.data import RunData
    from ..run.resume import config_record

    rng = np.random.default_rng(seed)
    train = task.training_examples(steps, extra_args.get("training_seed", seed))
    test_examples = task.test_examples(test_k, extra_args.get("test_seed", seed))
    icrl = extra_args.get("icrl", True)
    mode = "icrl" if icrl else "icl"
    n_steps, test_steps = plan_steps(mode, len(train), test_every, max_examples)
    uses = strategy_of(strategy).cls.uses
    train = train[:n_steps]
    steps = len(train)
    args = {"model_name": model_name, "task_name": task.name, "context_strategy_name": strategy,
            "context_p_keep": p_keep, "max_context_examples": max_examples, "icrl": True,
            "icrl_omit_feedback": False, "icrl_flip_feedback": False, "icrl_flip_feedback_prob": None,
            "max_contexts": max_contexts if "max_contexts" in uses else -1,
            "approximate_context_sampling_method": sampling_method if "approximate_context_sampling_method" in uses
            else None,
            "temperature": 1.0, "train_k": steps, "test_every": test_every, "test_k": test_k,
            "exemplars_per_label": 0, "seed": seed, "training_seed": seed, "test_seed": seed,
            "backend": "synthetic", "device": None, "dtype": "auto", **extra_args}
    config = RunConfig.from_values({k: v for k, v in args.items() if k in SPEC_DEFAULTS})
    records = RunRecords(experiment_dir(out_dir, config.spec.as_record()))
    plan = Plan(mode, max_examples, n_steps, tuple(test_steps))
    backend = {"backend": "synthetic", "model_name": model_name}
    records.create(config_record(config, plan, RunData(task, train, test_examples), backend))
    strat = make_strategy(strategy, max_examples, p_keep, max_contexts, sampling_method,
                          published_quirks=bool(extra_args.get("published_tokenization")))
    chance = p_correct if callable(p_correct) else (lambda t: p_correct)
    train_lines, test_lines = _play(task, train, test_examples, set(test_steps), strat, icrl, chance, rng, seed)
    records.rewrite_train(train_lines)
    records.rewrite_test(test_lines)
    records.refresh_results(train_lines, test_lines, n_steps, mode)
    return records.directory


def _play(task: Task, train: Sequence[Example], test_examples: Sequence[Example], tests: set[int], strat: Strategy,
          icrl: bool, chance: Callable[[int], float], rng: np.random.Generator,
          seed: int) -> tuple[list[TrainLine], list[TestLine]]:
    """The run's train and test lines: each step's context from ``strat``, a prediction right with
    probability ``chance(step)`` (none in a supervised ICL run), a test at each step of ``tests``."""
    history: list[Episode] = []
    test_answers = [task.answer(e) for e in test_examples]
    train_lines: list[TrainLine] = []
    test_lines: list[TestLine] = []
    for t, example in enumerate(train):
        context = strat.select(history, np.random.default_rng(seed + t))
        ids = [e.step for e in context if e.step is not None]
        if len(ids) != len(context):
            raise ValueError(f"step {t}: the strategy chose an episode without a step")
        answer = task.answer(example)
        prediction: Optional[str]
        accuracy: Optional[int]
        if icrl:
            prediction = answer if rng.random() < chance(t) else task.labels[int(rng.integers(len(task.labels)))]
            accuracy = int(prediction == answer)
        else:  # supervised ICL: no training call, the gold answer is shown
            prediction = accuracy = None
        if t in tests:
            predictions = [a if rng.random() < chance(t) else task.labels[0] for a in test_answers]
            correct = [int(p == a) for p, a in zip(predictions, test_answers)]
            test_lines.append(TestLine(t, sum(correct) / len(correct), per_class_accuracy(test_answers, correct),
                                       predictions, len(ids), ids, metrics=strat.metrics()))
        episode = Episode(task.prompt(example), prediction, accuracy, answer, accuracy, t)
        train_lines.append(TrainLine(t, example.id, episode.prompt, prediction, accuracy, answer, accuracy, len(ids),
                                     ids, strat.metrics()))
        history.append(episode)
    return train_lines, test_lines
