"""Long-context RoPE scaling: the published default for Qwen2.5 and the config overrides.

The published code loads every model whose name contains ``Qwen2.5`` with YaRN, factor 4
over an original 32,768 positions, so its window is 131,072 tokens. We do the same by
default (``--rope_scaling`` omitted or ``auto``); ``--rope_scaling none`` turns it off and
``TYPE:FACTOR:ORIGINAL_LENGTH`` (e.g. ``yarn:4.0:32768``) sets it for any model.

transformers 5 reads ``rope_parameters`` and, when one is passed, drops the model's own
``rope_theta`` unless it is in it; older versions read ``rope_scaling`` next to
``rope_theta``. ``config_overrides`` therefore always carries the model's ``rope_theta``
(read from its config.json) along with the scaling.
"""

from __future__ import annotations

from typing import Any, Optional

from icrl.errors import UsageError

AUTO, NONE = "auto", "none"
QWEN25_ROPE_SCALING = "yarn:4.0:32768"  # the published setting for Qwen2.5
KINDS = ("yarn", "dynamic", "linear")


def default_rope_scaling(model_name: str) -> Optional[str]:
    """The published default: YaRN x4 over 32,768 for any model whose name contains Qwen2.5
    (a Hub id, a local folder or a Hub cache path; case-insensitive), else none."""
    return QWEN25_ROPE_SCALING if "qwen2.5" in str(model_name).lower() else None


def resolve_rope_scaling(model_name: str, spec: Optional[str]) -> Optional[str]:
    """The scaling to apply: ``None``/``auto`` -> the default for the model, ``none`` -> off,
    anything else is checked and returned as it is."""
    if spec is None or spec.lower() == AUTO:
        return default_rope_scaling(model_name)
    if spec.lower() == NONE:
        return None
    parse_rope_scaling_spec(spec)
    return spec


def parse_rope_scaling_spec(spec: str) -> tuple[str, float, int]:
    """``yarn:4.0:32768`` -> ("yarn", 4.0, 32768); a one-line UsageError otherwise."""
    parts = spec.split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        kind, factor, original = parts[0], float(parts[1]), int(parts[2])
    except ValueError:
        raise UsageError(f"--rope_scaling {spec!r} is not TYPE:FACTOR:ORIGINAL_LENGTH (e.g. yarn:4.0:32768), "
                         f"auto or none") from None
    if kind not in KINDS or not factor > 1 or original <= 0:
        raise UsageError(f"--rope_scaling {spec!r}: type must be {', '.join(KINDS)}, factor > 1, length > 0")
    return kind, factor, original


def scaled_length(spec: Optional[str]) -> Optional[int]:
    """The model length under ``spec``: factor x original length (None without scaling)."""
    if not spec:
        return None
    _, factor, original = parse_rope_scaling_spec(spec)
    return int(original * factor)


def rope_theta_of(config: Optional[dict[str, Any]]) -> Optional[float]:
    """The model's own RoPE base from its config.json (top level, or in rope_parameters)."""
    if not isinstance(config, dict):
        return None
    theta = config.get("rope_theta")
    if theta is None and isinstance(config.get("rope_parameters"), dict):
        theta = config["rope_parameters"].get("rope_theta")
    return float(theta) if isinstance(theta, (int, float)) and not isinstance(theta, bool) else None


def config_overrides(spec: Optional[str], rope_theta: Optional[float] = None,
                     transformers_major: int = 5) -> dict[str, Any]:
    """Config overrides for ``spec`` (``{}`` without scaling), plus ``max_model_len``.

    transformers >= 5: ``{"rope_parameters": {..., "rope_theta": theta}}``; older:
    ``{"rope_scaling": {...}, "rope_theta": theta}``. Pass the model's ``rope_theta``
    (``rope_theta_of(config)``): without it transformers 5 falls back to its default base."""
    if not spec:
        return {}
    kind, factor, original = parse_rope_scaling_spec(spec)
    scaling: dict[str, Any] = {"rope_type": kind, "factor": factor, "original_max_position_embeddings": original}
    if transformers_major >= 5:
        if rope_theta is not None:
            scaling["rope_theta"] = rope_theta
        overrides: dict[str, Any] = {"rope_parameters": scaling}
    else:
        overrides = {"rope_scaling": scaling}
        if rope_theta is not None:
            overrides["rope_theta"] = rope_theta
    overrides["max_model_len"] = int(original * factor)
    return overrides


def transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])
