"""The embedded model (icrl.backends.embedded): a conversion killed half-way leaves no folder
that a later run would trust."""

from __future__ import annotations


def test_killed_model_conversion_folder_is_removed(tmp_path, monkeypatch):
    from icrl.backends import embedded

    monkeypatch.setenv("ICRL_CACHE_DIR", str(tmp_path))
    partial = tmp_path / "models" / ".smollm2-135m-abc123"
    partial.mkdir(parents=True)
    (partial / "model.safetensors").write_bytes(b"half")

    def convert(name, target):
        target.mkdir()
        (target / "config.json").write_text("{}")
        (target / "tokenizer_config.json").write_text("{}")
        return target

    monkeypatch.setattr(embedded, "_convert", convert)
    assert embedded.converted_dir("smollm2-135m") == tmp_path / "models" / "smollm2-135m"
    assert not partial.exists()

