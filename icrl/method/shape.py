"""What kind of run a part of the method is asked to join (``RunShape``): what the parts'
checks read of a run besides their own settings (icrl.cli.validate builds it from the run's
configuration; nothing below icrl.run sees the whole configuration)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class RunShape:
    """``icrl``: --icrl (True), --no-icrl (False) or neither (None); ``agent``: --agent;
    ``strategy``: --context_strategy_name (None: none given); ``max_context_examples``: as given
    (0: zero-shot; None: sized from the window)."""

    icrl: Optional[bool] = True
    agent: str = "llm"
    strategy: Optional[str] = None
    max_context_examples: Optional[int] = None

    @property
    def zero_shot(self) -> bool:
        return self.max_context_examples == 0

    @classmethod
    def of_args(cls, args: Mapping[str, Any]) -> "RunShape":
        """The shape of the run of config.json "args" (or of the flags' values by name)."""
        return cls(args.get("icrl"), args.get("agent", "llm"), args.get("context_strategy_name"),
                   args.get("max_context_examples"))
