"""Lock-step runs on one backend whose API reports usage (icrl.sweep.lockstep): each run's view
reports the run's own share, whether the backend tells callers apart or not."""

from __future__ import annotations

import pytest

from helpers import MeteredFake
from icrl.backends.fake import FakeBackend
from icrl.backends.usage import ReportsUsage, Tally, Usage, caller
from icrl.sweep.lockstep import LockStep

LABELS = ["a", "b"]


class Keyed(MeteredFake):
    """A metered fake that serves every call of a batch in one ``predict_calls`` and tells its
    callers apart (``usage_of``), as the server backend does."""

    def __init__(self, model_name, **options):
        super().__init__(model_name, **options)
        self.tally = Tally()
        self.batches = 0

    def usage(self):
        return self.tally.total()

    def usage_of(self, key):
        return self.tally.of(key)

    def predict_calls(self, calls):
        self.batches += 1
        out = []
        for call in calls:
            token = caller.set(call.key)
            n = len(call.prompts)
            self.tally.add(Usage(self.prompt * n, self.cached * n, n, n))
            caller.reset(token)
            out.append(FakeBackend.predict(self, call.prompts, call.labels, call.temperature, call.seed))
        return out


def run_of(prompts: int):
    """A run that predicts ``prompts`` prompts twice and reports its view's usage."""
    def target(view):
        assert isinstance(view, ReportsUsage)
        for step in range(2):
            view.predict([f"q{step} {i}" for i in range(prompts)], LABELS, 0.0, step)
        return {"finished": True, "usage": view.usage()}
    return target


@pytest.mark.parametrize("backend", [MeteredFake("fake"), Keyed("fake")], ids=["call_by_call", "per_caller"])
def test_each_run_reports_its_own_share_of_the_usage(backend):
    outcomes = LockStep(backend).run([run_of(1), run_of(3)])
    assert [o.summary["usage"] for o in outcomes] == [Usage(20, 12, 2, 2), Usage(60, 36, 6, 6)]
    assert backend.usage() == Usage(80, 48, 8, 8)
    if isinstance(backend, Keyed):
        assert backend.batches == 2  # the runs' calls still went out together


def test_a_backend_without_usage_gives_views_without_usage():
    seen = []
    LockStep(FakeBackend("fake")).run([lambda view: seen.append(isinstance(view, ReportsUsage)) or {"finished": True}])
    assert seen == [False]
