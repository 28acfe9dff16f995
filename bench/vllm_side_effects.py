"""What vLLM's CPU engine changes in the process that starts it, and what that does to the
transformers backend in the same process.

Times a cold transformers test step (--prompts banking77 prompts sharing a ~1,500-token ICRL
context, as bench/engines.py's) with the CPU use of this process's children while it runs, and
takes a snapshot of the process (torch's intra- and inter-op threads, the CPUs it may run on, the
OpenMP variables, its thread count, its children's CPU use over 2 idle seconds): before vLLM
loads, after the engine loads, after its first call (77 labels, as bench/engines.py's), 10 s
later, and after the engine is closed.

    python bench/vllm_side_effects.py [--model smollm2-135m] [--prompts 16]

Needs vLLM (`make setup-vllm` on a CPU machine).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from prefix_reuse import machine_load  # noqa: E402

OMP_VARIABLES = ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND", "OMP_WAIT_POLICY", "KMP_AFFINITY",
                 "KMP_BLOCKTIME", "GOMP_CPU_AFFINITY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS")
TICK = os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> list[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    out, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid]
        out += children
        frontier += children
    return out


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def snapshot(label: str) -> None:
    import torch

    children = descendants(os.getpid())
    before = {pid: cpu_seconds(pid) for pid in children + [os.getpid()]}
    time.sleep(2.0)
    busy = {pid: (cpu_seconds(pid) - t) / 2.0 for pid, t in before.items()}
    env = {k: os.environ[k] for k in OMP_VARIABLES if k in os.environ}
    print(f"  [{label}] torch threads {torch.get_num_threads()} (inter-op {torch.get_num_interop_threads()}), "
          f"CPUs allowed {sorted(os.sched_getaffinity(0))}, threads in this process "
          f"{len(os.listdir('/proc/self/task'))}, OpenMP variables {env or 'none'}", flush=True)
    print(f"  [{label}] CPU use over 2 idle seconds: this process {busy[os.getpid()]:.0%}; children: "
          + (", ".join(f"{name(p)} ({p}) {busy[p]:.0%}" for p in children) or "none"), flush=True)


def test_step(backend, prompts, labels) -> tuple[float, dict]:
    """A cold test step on the transformers backend, and the CPU use of this process's children
    while it ran (seconds of CPU per second)."""
    children = descendants(os.getpid())
    before = {pid: cpu_seconds(pid) for pid in children}
    backend.reset_cache()
    tic = time.perf_counter()
    backend.predict(prompts, labels, 0.0, 0)
    seconds = time.perf_counter() - tic
    return seconds, {pid: (cpu_seconds(pid) - t) / seconds for pid, t in before.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--context_tokens", type=int, default=1500)
    args = parser.parse_args()
    from prefix_reuse import data_dir, icrl_context, test_prompts

    from icrl.backends import load_backend
    from icrl.tasks import load_task

    print(f"start: {machine_load()}", flush=True)
    task = load_task("banking77", data_dir(args.data_dir))
    hf = load_backend(args.model, backend="transformers")
    prompts = test_prompts(task, hf, icrl_context(task, hf, args.context_tokens), args.prompts)
    hf.predict(prompts[:1], task.labels, 0.0, 0)
    rows = []

    def measure(label: str) -> None:
        seconds, busy = test_step(hf, prompts, task.labels)
        rows.append((label, seconds))
        print(f"{label}: cold test step of {len(prompts)} prompts {seconds:.2f} s; children's CPU use meanwhile: "
              + (", ".join(f"{name(p)} ({p}) {b:.0%}" for p, b in busy.items()) or "none") + f"; {machine_load()}",
              flush=True)
        snapshot(label)

    measure("transformers alone")
    vllm = load_backend(args.model, backend="vllm", seed=0)
    measure("vLLM engine loaded")
    vllm.predict(prompts[:1], task.labels, 0.0, 0)  # bench/engines.py's first call: 77 labels
    measure("after vLLM's first call")
    time.sleep(10)
    measure("10 s later")
    vllm.close()
    measure("vLLM closed")
    base = rows[0][1]
    print("\n" + "\n".join(f"{label:<26} {seconds:8.2f} s  {seconds / base:6.2f}x" for label, seconds in rows))


if __name__ == "__main__":
    main()
