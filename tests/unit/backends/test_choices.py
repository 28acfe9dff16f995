"""A served engine's label choice (icrl.backends.choices): the texts a constrained output may take,
the label read back from a text, and the sampling arguments."""

from __future__ import annotations

import pytest

from icrl.backends import choices as ch
from icrl.errors import UsageError

LABELS = ["card arrival", "card", "top up failed"]


def test_choices_are_a_space_then_the_label():
    assert ch.choices(LABELS) == [" card arrival", " card", " top up failed"]
    assert ch.choices([]) == []


@pytest.mark.parametrize("text, label", [
    (" card arrival", "card arrival"), ("card", "card"), (" top up failed\n", "top up failed"),
])
def test_parse_output_maps_text_back_to_its_label(text, label):
    assert ch.parse_output(text, LABELS) == label


@pytest.mark.parametrize("text", [" card arr", " Card", "", " card arrival card"])
def test_parse_output_rejects_non_labels(text):
    with pytest.raises(RuntimeError, match="not one of the 3 labels"):
        ch.parse_output(text, LABELS)


def test_sampling_kwargs():
    kwargs = ch.sampling_kwargs(0, 7, 5)
    assert kwargs == {"temperature": 0.0, "seed": 7, "max_tokens": 5}
    assert isinstance(kwargs["temperature"], float)
    assert ch.sampling_kwargs(1.0, 0, 12)["temperature"] == 1.0
    with pytest.raises(UsageError, match="temperature"):
        ch.sampling_kwargs(-0.1, 0, 5)
