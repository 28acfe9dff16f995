"""icrl.backends.usage: a step's usage is the difference of a backend's totals."""

from icrl.backends.usage import ReportsUsage, Usage


def test_a_steps_usage_is_the_difference_of_the_totals():
    before = Usage(prompt_tokens=100, cached_prompt_tokens=40, output_tokens=5, requests=2)
    after = before + Usage(prompt_tokens=30, cached_prompt_tokens=20, output_tokens=3, requests=1)
    assert after - before == Usage(30, 20, 3, 1)
    assert (after - before).as_dict() == {"prompt_tokens": 30, "cached_prompt_tokens": 20,
                                          "output_tokens": 3, "requests": 1}


def test_only_a_backend_with_usage_reports_it():
    class Api:
        def usage(self) -> Usage:
            return Usage()

    class Local:
        pass

    assert isinstance(Api(), ReportsUsage) and not isinstance(Local(), ReportsUsage)


def test_a_tally_tells_callers_apart():
    from icrl.backends.usage import Tally, caller

    tally = Tally()
    tally.add(Usage(5, 0, 1, 1))
    token = caller.set("run-a")
    tally.add(Usage(7, 3, 1, 1))
    caller.reset(token)
    assert tally.total() == Usage(12, 3, 2, 2)
    assert tally.of("run-a") == Usage(7, 3, 1, 1) and tally.of("run-b") == Usage()
