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


def test_what_the_tools_ask_of_a_backend_is_read_from_its_class():
    """--base_url goes to the backends whose class takes it; a hosted or the fake backend's
    model name is a label (``local_model = False``), a local engine's a folder or Hub id."""
    served = [name for name in backends.BACKENDS if backends.takes_option(name, "base_url")]
    assert served == ["openai", "anthropic", "gemini"]
    local = {name: backends.has_local_model(name) for name in backends.BACKENDS}
    assert local == {"transformers": True, "vllm": True, "openai": False, "anthropic": False, "gemini": False,
                     "fake": False}
    assert backends.has_local_model("auto")
    with pytest.raises(UsageError, match="unknown backend 'nope'"):
        backends.has_local_model("nope")
