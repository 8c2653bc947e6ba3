"""Optional extras: which feature needs which package, checked before any work.

The one table of what ``pip install 'gpuplan[EXTRA]'`` brings and which request needs it. A request whose
package is absent stops before tracing with one line naming the feature and the install command
(issue 18: a LoRA estimate used to trace for 46 s and then fail on ``import peft``). The check asks
``importlib.util.find_spec``, so it imports nothing (a cached answer stays torch-free).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from gpuplan.errors import MissingDependencyError

if TYPE_CHECKING:
    from gpuplan.workload import Workload

EXTRA_OF: Final[dict[str, str]] = {
    "torch": "torch",
    "transformers": "torch",
    "safetensors": "torch",
    "torchvision": "vision",
    "timm": "vision",
    "pynvml": "nvml",
    "peft": "finetune",
    "bitsandbytes": "finetune",
    "torchao": "finetune",
    "huggingface_hub": "hub",
    "gguf": "hub",
    "matplotlib": "plot",
    "starlette": "ui",
    "uvicorn": "ui",
    "submitit": "cluster",
}
"""Import name → the extra in pyproject.toml that installs it (the README's table says the same)."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """``feature`` needs the package imported as ``module``."""

    module: str
    feature: str

    @property
    def extra(self) -> str:
        return EXTRA_OF[self.module]

    @property
    def install(self) -> str:
        return f"pip install 'gpuplan[{self.extra}]'"

    def message(self) -> str:
        return f"{self.feature} needs the '{self.module}' package, which is not installed: {self.install}"


def installed(module: str) -> bool:
    """``module`` can be imported (found on the path; nothing is imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def require(*requirements: Requirement) -> None:
    """One line (MissingDependencyError, exit 2 on the command line) for the first absent package."""
    for req in requirements:
        if not installed(req.module):
            raise MissingDependencyError(req.message())


def workload_requirements(workload: Workload) -> list[Requirement]:
    """The packages a workload's techniques run through (the trace imports them)."""
    reqs: list[Requirement] = []
    if workload.uses_peft:
        reqs.append(Requirement("peft", f"--peft {workload.peft} (the real peft library wraps the model)"))
    if workload.scaled_training:
        what = f"--precision {workload.precision} (traced through torchao's float8 training)"
        reqs.append(Requirement("torchao", what))
    return reqs


def require_workload(workload: Workload) -> None:
    """Stop before any work when a technique of ``workload`` needs a package that is absent."""
    require(*workload_requirements(workload))


PLOT: Final = Requirement("matplotlib", "--plot and --html (pictures)")
HUB: Final = Requirement("huggingface_hub", "a Hugging Face Hub id ORG/NAME")
GGUF: Final = Requirement("gguf", "reading .gguf files")
TIMM: Final = Requirement("timm", "timm: models")
TORCHVISION: Final = Requirement("torchvision", "torchvision models")
TRANSFORMERS: Final = Requirement("transformers", "this model (a Hugging Face architecture)")
CLUSTER: Final = Requirement("submitit", "--launcher slurm (jobs submitted through submitit)")
UI: Final = (Requirement("starlette", "gpuplan ui"), Requirement("uvicorn", "gpuplan ui"))

__all__ = ["CLUSTER", "EXTRA_OF", "GGUF", "HUB", "PLOT", "TIMM", "TORCHVISION", "TRANSFORMERS", "UI", "Requirement",
           "installed", "require", "require_workload", "workload_requirements"]
