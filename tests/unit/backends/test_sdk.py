"""icrl.backends.sdk: an API backend's SDK that is not installed and a request limit out of range are
each one line."""

import sys

import pytest

from icrl.backends.sdk import check_limits, import_sdk
from icrl.errors import UsageError


def test_an_sdk_that_is_not_installed_is_the_backends_line(monkeypatch):
    assert import_sdk("json", "unused").dumps([1]) == "[1]"
    monkeypatch.setitem(sys.modules, "an_sdk", None)  # import an_sdk raises ImportError
    with pytest.raises(UsageError, match=r"^pip install an-sdk$"):
        import_sdk("an_sdk", "pip install an-sdk")


@pytest.mark.parametrize("limits", [(0, 1.0, 0, 1.0), (1, 0.0, 0, 1.0), (1, 1.0, -1, 1.0), (1, 1.0, 0, 0.0)])
def test_a_request_limit_out_of_range_is_one_line(limits):
    check_limits(1, 0.5, 0, 0.5)
    with pytest.raises(UsageError, match="--max_concurrency must be >= 1, --timeout and --first_answer_timeout > 0"):
        check_limits(*limits)
