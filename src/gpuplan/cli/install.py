"""``gpuplan install``: the exact pip command for this machine, or for a GPU / driver / Python given
by hand.

    gpuplan install [--gpu NAME|sm_XY|X.Y|gfxNNNN] [--driver VERSION] [--python X.Y] [--torch X.Y[.Z]] [--rocm X.Y]
                    [--os linux|windows|macos] [--json]

Values not given are read from this machine (without importing torch). Exit codes: 0 a command was
found, 1 no official build fits, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import re

from gpuplan.compat import dataload
from gpuplan.compat.facts import LiveFacts
from gpuplan.compat.gpunames import cc_from_name, cc_from_text, known_name_examples
from gpuplan.compat.install import InstallRequest, plan_install, request_from_environment
from gpuplan.compat.probe import probe
from gpuplan.compat.render import install_json, install_text
from gpuplan.compat.rocm import gfx_for_name, gfx_in
from gpuplan.compat.versions import major_minor
from gpuplan.errors import ConfigError, UnknownGPUError, did_you_mean, require_choice

OSES = ("linux", "windows", "macos")


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", metavar="GPU",
                        help="GPU name (RTX 4090, H100-SXM, RX 7900 XTX, M3 Max ...), compute capability (8.6), "
                             "sm_86, an AMD target (gfx1100); 'none' for the CPU build")
    parser.add_argument("--driver", metavar="VERSION", help="NVIDIA driver version, e.g. 550.54.15")
    parser.add_argument("--python", metavar="X.Y", help="Python version, e.g. 3.12")
    parser.add_argument("--torch", metavar="X.Y[.Z]", help="stay on this PyTorch release")
    parser.add_argument("--rocm", metavar="X.Y", help="AMD GPUs: only wheels built for this ROCm version (e.g. 6.4)")
    parser.add_argument("--os", choices=OSES, help="operating system (default: this machine's)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")


def _resolve_gpu(text: str) -> tuple[str | None, str | None, str, str | None]:
    """-> (name, compute capability, vendor "nvidia" | "amd" | "apple", AMD gfx target). Raises
    UnknownGPUError listing close names."""
    cc = cc_from_text(text)
    if cc is not None:
        if cc not in dataload.gpu_data().families:
            known = ", ".join(dataload.gpu_data().families)
            raise ConfigError(f"unknown compute capability {text!r} (known: {known})")
        return None, cc, "nvidia", None
    gfx = gfx_in(text)
    if gfx is not None and re.fullmatch(r"gfx\w+", text.strip(), re.IGNORECASE):
        return None, None, "amd", gfx
    cc = cc_from_name(text)
    if cc is not None:
        return text, cc, "nvidia", None
    try:
        from gpuplan.hardware import get_gpu  # the GPU catalog: heavier, only needed for catalog names

        gpu = get_gpu(text)
    except (UnknownGPUError, ImportError, ValueError):  # not in the catalog, or the catalog is unusable
        if gfx_for_name(text) is not None and re.search(r"\b(RX|Radeon|Instinct|MI\d)", text, re.IGNORECASE):
            return text, None, "amd", gfx_for_name(text)
        names = known_name_examples()
        raise UnknownGPUError(
            f"unknown GPU {text!r}{did_you_mean(text, names)} (give a name such as 'RTX 4090', a catalog id "
            "from `gpuplan gpus`, a compute capability like 8.6, sm_86, or an AMD target like gfx1100)"
        ) from None
    vendor = gpu.vendor.lower()
    if vendor == "amd":
        return gpu.name, None, "amd", gfx_in(gpu.chip) or gfx_for_name(gpu.name)
    if vendor == "apple":
        return gpu.name, None, "apple", None
    if vendor != "nvidia" or gpu.compute_capability is None:
        raise ConfigError(f"GPU {text!r} is {gpu.vendor}: gpuplan install covers NVIDIA (CUDA), AMD (ROCm) "
                          "and Apple (MPS)")
    major, minor = gpu.compute_capability
    return gpu.name, f"{major}.{minor}", "nvidia", None


def _check_driver(text: str) -> str:
    if not re.fullmatch(r"\d{3}(\.\d{1,3}){0,2}", text):
        raise ConfigError(f"bad --driver {text!r}: expected an NVIDIA driver version like 550.54.15")
    return text


def _check_python(text: str) -> str:
    mm = major_minor(text) if re.fullmatch(r"3\.\d{1,2}(\.\d+)?", text) else None
    if mm is None:
        raise ConfigError(f"bad --python {text!r}: expected a version like 3.12")
    return mm


def _check_torch(text: str) -> str:
    known = [r.version for r in dataload.releases()]
    mm = major_minor(text) if re.fullmatch(r"\d+\.\d+(\.\d+)?", text) else None
    if mm is None or mm not in known:
        raise ConfigError(f"unknown --torch {text!r}{did_you_mean(text, known)} (known releases: "
                          f"{', '.join(reversed(known))})")
    return text


def _check_rocm(text: str) -> str:
    known = sorted({v for r in dataload.releases() for v in r.rocm}, key=lambda v: [int(p) for p in v.split(".")])
    if text not in known and not any(v.startswith(text + ".") for v in known):
        raise ConfigError(f"unknown --rocm {text!r}{did_you_mean(text, known)} (ROCm versions with PyTorch "
                          f"wheels: {', '.join(known)})")
    return text


def build_request(args: argparse.Namespace) -> InstallRequest:
    """The request from the flags; every value not given comes from this machine's probe."""
    complete = args.gpu and args.driver and args.python and args.os
    here = None if complete else request_from_environment(probe(LiveFacts()))
    base = here or InstallRequest(os="linux")
    name, cc, amd, gfx = base.gpu_name, base.cc, base.amd, base.gfx
    driver, driver_cuda = base.driver_version, base.driver_cuda
    os_name = require_choice("--os", args.os, OSES) if args.os else base.os
    if args.gpu:
        if args.gpu.lower() in ("none", "cpu"):
            name, cc, amd, gfx, driver, driver_cuda = None, None, False, None, None, None
        else:
            name, cc, vendor, gfx = _resolve_gpu(args.gpu)
            amd = vendor == "amd"
            if vendor == "apple":
                if args.os and os_name != "macos":
                    raise ConfigError(f"GPU {args.gpu!r} is an Apple GPU: PyTorch uses it on macOS only "
                                      "(MPS); drop --os or give --os macos")
                os_name = "macos"
    if args.driver:
        driver, driver_cuda = _check_driver(args.driver), None
    if args.rocm and not amd:
        raise ConfigError("--rocm applies to AMD GPUs: give an AMD --gpu (e.g. 'RX 7900 XTX' or gfx1100)")
    return InstallRequest(
        os=os_name,
        machine=base.machine,
        python=_check_python(args.python) if args.python else base.python,
        gpu_name=name,
        cc=cc,
        driver_version=driver,
        driver_cuda=driver_cuda,
        amd=amd,
        torch=_check_torch(args.torch) if args.torch else None,
        gfx=gfx,
        rocm=_check_rocm(args.rocm) if args.rocm else None,
    )


def run(args: argparse.Namespace) -> int:
    plan = plan_install(build_request(args))
    if args.json:
        print(json.dumps(install_json(plan), indent=2))
    else:
        print(install_text(plan), end="")
    return 0 if plan.ok else 1
