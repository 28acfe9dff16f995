"""Backends chosen by name: one a plugin registers is a --backend choice, loaded like a built-in;
a name taken is refused."""

from __future__ import annotations

import pytest

from icrl import backends
from icrl.backends.fake import FakeBackend
from icrl.errors import UsageError


class Echo(FakeBackend):
    name = "echo"


def test_a_registered_backend_is_a_choice_and_loads():
    backends.register_backend("echo", Echo)
    try:
        assert "echo" in backends.BACKEND_CHOICES and backends.backend_owner("echo") is None
        loaded = backends.load_backend("fake", "echo")
        assert isinstance(loaded, Echo) and loaded.predict([loaded.render([], "A:")], ["x", "y"], 0.0, 1)[0] in "xy"
        spec = backends.backend_spec("fake", "echo", {"batch_size": 3})
        assert spec.name == "echo"
    finally:
        backends._unregister("echo")
    assert "echo" not in backends.BACKEND_CHOICES and "echo" not in backends.BACKENDS


def test_a_taken_name_is_refused():
    with pytest.raises(UsageError, match=r"^the backend 'fake' is registered already by icrl \(built in\)"):
        backends.register_backend("fake", Echo)
    with pytest.raises(UsageError, match="the backend 'auto'"):
        backends.register_backend("auto", Echo)
