"""icrl: a benchmark harness for in-context reinforcement learning on classification tasks.

Importing the package is cheap: heavy libraries (torch, transformers, vLLM) load lazily.
"""

__version__ = "0.1.0"
