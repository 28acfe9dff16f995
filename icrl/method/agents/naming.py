"""The names of the agents: choices, labels in figures and tables, run folders (no heavy imports)."""

from __future__ import annotations

FEATURES = ("tfidf", "minilm")
AGENTS = ("llm", "linucb", "epsilon_greedy", "supervised")
NAMES = {"linucb": "LinUCB", "epsilon_greedy": "epsilon-greedy", "supervised": "online supervised"}
DEFAULT_ALPHA, DEFAULT_EPSILON = 1.0, 0.1


def is_learner(agent) -> bool:
    return agent not in (None, "llm")


def agent_label(agent: str, features: str, alpha=DEFAULT_ALPHA, epsilon=DEFAULT_EPSILON) -> str:
    """The name a figure or table gives a learner, e.g. "LinUCB (tfidf)", "LinUCB (minilm, alpha=0.5)"."""
    parts = [str(features)]
    if agent == "linucb" and alpha is not None and float(alpha) != DEFAULT_ALPHA:
        parts.append(f"alpha={float(alpha):g}")
    if agent == "epsilon_greedy" and epsilon is not None and float(epsilon) != DEFAULT_EPSILON:
        parts.append(f"epsilon={float(epsilon):g}")
    return f"{NAMES.get(agent, agent)} ({', '.join(parts)})"


def label_of_args(args: dict) -> str:
    """``agent_label`` of a config.json "args"."""
    return agent_label(args.get("agent"), args.get("features", FEATURES[0]), args.get("bandit_alpha", DEFAULT_ALPHA),
                       args.get("bandit_epsilon", DEFAULT_EPSILON))


def agent_folder(args: dict) -> str:
    """The run folder's first part for a learner, in place of the model's: ``agent+<agent>+<features>``
    (a model's folder never holds a '+': icrl.records.safepaths)."""
    return f"agent+{args['agent']}+{args.get('features', FEATURES[0])}"
