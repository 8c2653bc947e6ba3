"""GPU kernel microbenchmarks: the cost model's factors measured on the GPU at hand (issue 10).

    python benchmarks/gpu_kernels.py [--out PATH] [--budget-s 420] [--cpu-smoke]

On a CUDA machine it times, with ``torch.cuda.Event`` (warm-up first, median of repeats):

* GEMMs over a shape grid (M, N, K from 64 to 8192; bf16, fp16, fp32 with TF32 off and on);
* convolutions of ResNet-50 and ConvNeXt-T shapes, NCHW and channels_last, fp16 and fp32 (cuDNN's
  default TF32), forward;
* SDPA forward and forward+backward per backend (flash, efficient, math) over sequence lengths;
* memory-bound kernels (add, mul, GELU, LayerNorm, copy) over sizes: achieved GB/s;
* eager launch + dispatch: CPU time per tiny kernel, and the GPU gap between back-to-back kernels.

It writes one JSON file (default ``src/gpuplan/perf/data/measured/<arch>-<gpu>.json``) with the GPU,
SM count, torch / CUDA / cuDNN / driver versions and every measurement, each beside what the cost
model predicts for it (``model_s``: perf/roofline.op_time with the architecture's factors), and
prints a summary: the median measured/model ratio per class. The whole run stops at ``--budget-s``
(sections past it are listed as skipped), well inside 8 minutes.

How its output is consumed: the file is calibration data for that architecture. scripts/calibrate_fit.py
reads the ratios to set the architecture's priors (``gemm_scale``: median measured/modelled large-GEMM
rate; ``attention_fused`` per backend; ``bandwidth``: median achieved fraction of the datasheet;
``launch_overhead_s`` / ``graph_launch_overhead_s``) in perf/data/arch_factors.json, with the file
named as their source, and the residual tables in docs/accuracy.md are regenerated. Nothing in the
tests needs a GPU: a committed measurement file is data, read like any other.

Without a GPU it says so and exits 0; ``--cpu-smoke`` runs a few tiny cases on the CPU through the
same code (wall-clock timing instead of events) to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MEASURED_DIR = ROOT / "src" / "gpuplan" / "perf" / "data" / "measured"

GEMM_SIDES = (64, 256, 1024, 2048, 4096, 8192)
# ResNet-50 (torchvision) and ConvNeXt-T (timm) layers: (name, C_in, C_out, kernel, stride, groups, H)
CONVS = (
    ("rn50.conv1", 3, 64, 7, 2, 1, 224),
    ("rn50.l1.1x1", 64, 256, 1, 1, 1, 56),
    ("rn50.l1.3x3", 64, 64, 3, 1, 1, 56),
    ("rn50.l2.3x3", 128, 128, 3, 1, 1, 28),
    ("rn50.l3.3x3", 256, 256, 3, 1, 1, 14),
    ("rn50.l4.3x3", 512, 512, 3, 1, 1, 7),
    ("rn50.l4.1x1", 2048, 512, 1, 1, 1, 7),
    ("convnext.stem", 3, 96, 4, 4, 1, 224),
    ("convnext.dw7x7", 96, 96, 7, 1, 96, 56),
    ("convnext.dw7x7.s3", 384, 384, 7, 1, 384, 14),
)
SEQ_LENS = (256, 1024, 2048, 4096, 8192)
ELEMENTWISE_SIZES = (1 << 20, 1 << 24, 1 << 27)


class Timer:
    """Median time of ``fn`` with CUDA events (GPU) or the wall clock (CPU smoke)."""

    def __init__(self, cuda: bool, repeats: int) -> None:
        self.cuda = cuda
        self.repeats = repeats

    def __call__(self, fn: Callable[[], Any]) -> float:
        import torch

        for _ in range(2):
            fn()
        if not self.cuda:
            times = []
            for _ in range(self.repeats):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            return statistics.median(times)
        torch.cuda.synchronize()
        times = []
        for _ in range(self.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)


def _record(name: str, op_class: str, dtype: str, flops: float, bytes_read: float, bytes_written: float) -> Any:
    from gpuplan.trace.records import OpRecord

    return OpRecord(name, "forward", "bench", op_class, dtype, int(flops), int(bytes_read), int(bytes_written))


def _model_s(rec: Any, gpu: Any, precision: str) -> float | None:
    """What the cost model says this kernel takes on the catalog GPU (None: GPU not in the catalog)."""
    if gpu is None:
        return None
    from gpuplan.perf.efficiency import efficiency_for
    from gpuplan.perf.roofline import op_time

    return op_time(rec, gpu, precision, efficiency_for(gpu)).kernel_s


def bench_gemm(timer: Timer, dev: str, gpu: Any, smoke: bool) -> list[dict[str, Any]]:
    import torch

    out = []
    sides = (64, 256) if smoke else GEMM_SIDES
    dtypes = ("float32",) if smoke else ("bfloat16", "float16", "float32", "tf32")
    for dt in dtypes:
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        tdt = torch.float32 if dt in ("float32", "tf32") else getattr(torch, dt)
        e = torch.empty((), dtype=tdt).element_size()
        for m in sides:
            for n in sides:
                for k in sides:
                    if not smoke and max(m, n, k) == 8192 and min(m, n, k) < 1024:
                        continue  # keep the grid inside the budget
                    a = torch.randn(m, k, device=dev, dtype=tdt)
                    b = torch.randn(k, n, device=dev, dtype=tdt)
                    s = timer(lambda a=a, b=b: a @ b)
                    rec = _record("aten.mm.default", "matmul", "float32" if dt == "tf32" else dt,
                                  2 * m * n * k, e * (m * k + k * n), e * m * n)
                    prec = {"bfloat16": "amp-bf16", "float16": "amp-fp16", "float32": "fp32", "tf32": "tf32"}[dt]
                    out.append({"kind": "gemm", "dtype": dt, "m": m, "n": n, "k": k, "measured_s": s,
                                "tflops": 2 * m * n * k / s / 1e12, "model_s": _model_s(rec, gpu, prec)})
    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default
    return out


def bench_conv(timer: Timer, dev: str, gpu: Any, smoke: bool) -> list[dict[str, Any]]:
    import torch

    out = []
    batch = 2 if smoke else 64
    for name, cin, cout, k, stride, groups, hw in CONVS[:2] if smoke else CONVS:
        for dt in ("float32",) if smoke else ("float16", "float32"):
            tdt = getattr(torch, dt)
            for layout in ("nchw", "channels_last"):
                fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
                conv = torch.nn.Conv2d(cin, cout, k, stride, padding=k // 2, groups=groups, bias=False)
                conv = conv.to(device=dev, dtype=tdt, memory_format=fmt)
                x = torch.randn(batch, cin, hw, hw, device=dev, dtype=tdt).to(memory_format=fmt)
                with torch.no_grad():
                    y = conv(x)
                    s = timer(lambda conv=conv, x=x: conv(x))
                e = x.element_size()
                flops = 2 * y.numel() * cin // groups * k * k
                rec = _record("aten.convolution.default", "conv", dt, flops, e * (x.numel() + conv.weight.numel()),
                              e * y.numel())
                out.append({"kind": "conv", "name": name, "dtype": dt, "layout": layout, "batch": batch,
                            "measured_s": s, "tflops": flops / s / 1e12,
                            "model_s": _model_s(rec, gpu, "fp32" if dt == "float32" else "amp-fp16")})
    return out


def bench_sdpa(timer: Timer, dev: str, gpu: Any, smoke: bool) -> list[dict[str, Any]]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = []
    b, h, d = (1, 2, 64) if smoke else (4, 16, 128)
    dtype = torch.float32 if smoke else torch.bfloat16
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "math": SDPBackend.MATH}
    for s_len in (128,) if smoke else SEQ_LENS:
        for name, backend in backends.items():
            if smoke and name != "math":
                continue
            if name == "math" and s_len > 4096:
                continue  # the S×S scores of the math path: slow and large, two points are enough
            q, k, v = (torch.randn(b, h, s_len, d, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
            flops = 4 * b * h * s_len * s_len * d / 2  # causal: half the scores
            try:
                with sdpa_kernel(backend):
                    fwd = timer(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True))

                    def step(q: Any = q, k: Any = k, v: Any = v) -> None:
                        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

                    both = timer(step)
            except RuntimeError as exc:  # backend not available for this GPU/dtype
                out.append({"kind": "sdpa", "backend": name, "seq_len": s_len, "error": str(exc)[:200]})
                continue
            out.append({"kind": "sdpa", "backend": name, "seq_len": s_len, "batch": b, "heads": h, "head_dim": d,
                        "forward_s": fwd, "forward_backward_s": both, "forward_tflops": flops / fwd / 1e12,
                        "forward_backward_tflops": 3.5 * flops / both / 1e12})
    return out


def bench_memory(timer: Timer, dev: str, gpu: Any, smoke: bool) -> list[dict[str, Any]]:
    import torch
    import torch.nn.functional as F

    out = []
    for n in (1 << 16,) if smoke else ELEMENTWISE_SIZES:
        x = torch.randn(n, device=dev, dtype=torch.bfloat16 if not smoke else torch.float32)
        y = torch.randn_like(x)
        width = 4096 if n >= 4096 else n
        ln = torch.nn.LayerNorm(width, device=dev, dtype=x.dtype)
        for name, (fn, moved) in _memory_kernels(x, y, ln, width, F.gelu).items():
            s = timer(fn)
            rec = _record(f"aten.{name}.default", "other", str(x.dtype).removeprefix("torch."), 0, moved * 2 // 3,
                          moved // 3)
            out.append({"kind": "memory", "op": name, "elements": n, "bytes": moved, "measured_s": s,
                        "gb_per_s": moved / s / 1e9,
                        "fraction_of_datasheet": (moved / s / 1e9 / gpu.memory_bandwidth_gb_per_s) if gpu else None,
                        "model_s": _model_s(rec, gpu, "bf16")})
    return out


def _memory_kernels(x: Any, y: Any, ln: Any, width: int, gelu: Any) -> dict[str, tuple[Callable[[], Any], int]]:
    """Each kernel and the bytes it moves (reads + writes)."""
    moved = x.numel() * x.element_size()
    return {
        "add": (lambda: x + y, 3 * moved),
        "mul": (lambda: x * y, 3 * moved),
        "gelu": (lambda: gelu(x), 2 * moved),
        "copy": (lambda: x.clone(), 2 * moved),
        "layer_norm": (lambda: ln(x.view(-1, width)), 2 * moved),
    }


def bench_launch(dev: str, cuda: bool, smoke: bool) -> list[dict[str, Any]]:
    """CPU time per eager tiny kernel (dispatch + launch), and the GPU time per kernel of a chain of
    tiny kernels (the gap a kernel costs when the CPU is not the limit: captured in a CUDA graph)."""
    import torch

    x = torch.zeros(1, device=dev)
    n = 200 if smoke else 5000
    if cuda:
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    cpu_s = (time.perf_counter() - t) / n
    if cuda:
        torch.cuda.synchronize()
    out = [{"kind": "launch", "what": "eager tiny kernel, CPU dispatch + launch", "per_kernel_s": cpu_s}]
    if cuda:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            with torch.cuda.graph(g):
                for _ in range(200):
                    x.add_(1)
        torch.cuda.current_stream().wait_stream(s)
        timer = Timer(True, 20)
        out.append({"kind": "launch", "what": "tiny kernel inside a CUDA graph (GPU gap)",
                    "per_kernel_s": timer(g.replay) / 200})
    return out


def versions(cuda: bool) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                            "cudnn": torch.backends.cudnn.version(), "python": platform.python_version()}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        info.update(gpu_name=props.name, sm_count=props.multi_processor_count,
                    compute_capability=f"{props.major}.{props.minor}")
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=False).stdout.strip()
        except OSError:
            info["driver"] = None
    return info


def catalog_gpu(name: str | None) -> Any:
    """The catalog entry of the GPU at hand (by its CUDA name), or None."""
    if not name:
        return None
    from gpuplan.errors import GpuplanError
    from gpuplan.hardware import get_gpu

    try:
        return get_gpu(name)
    except GpuplanError:
        return None


def summary(results: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'class':10s} {'rows':>5s} {'median measured/model':>22s}"]
    for kind in ("gemm", "conv", "memory"):
        ratios = [r["measured_s"] / r["model_s"] for r in results if r.get("kind") == kind and r.get("model_s")]
        if ratios:
            lines.append(f"{kind:10s} {len(ratios):5d} {statistics.median(ratios):22.3f}")
    for r in results:
        if r.get("kind") == "launch":
            lines.append(f"launch     {r['what']}: {r['per_kernel_s'] * 1e6:.2f} µs")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny cases on the CPU, to check the script")
    args = parser.parse_args(argv)
    import torch

    cuda = torch.cuda.is_available() and not args.cpu_smoke
    if not cuda and not args.cpu_smoke:
        print("no CUDA GPU here: nothing to measure (use --cpu-smoke to check the script on the CPU)")
        return 0
    dev = "cuda" if cuda else "cpu"
    info = versions(cuda)
    gpu = catalog_gpu(info.get("gpu_name"))
    timer = Timer(cuda, repeats=3 if args.cpu_smoke else 10)
    start = time.perf_counter()
    results: list[dict[str, Any]] = []
    skipped: list[str] = []
    sections: list[tuple[str, Callable[[], list[dict[str, Any]]]]] = [
        ("launch", lambda: bench_launch(dev, cuda, args.cpu_smoke)),
        ("memory", lambda: bench_memory(timer, dev, gpu, args.cpu_smoke)),
        ("gemm", lambda: bench_gemm(timer, dev, gpu, args.cpu_smoke)),
        ("conv", lambda: bench_conv(timer, dev, gpu, args.cpu_smoke)),
        ("sdpa", lambda: bench_sdpa(timer, dev, gpu, args.cpu_smoke)),
    ]
    for name, run in sections:
        if time.perf_counter() - start > args.budget_s:
            skipped.append(name)
            continue
        t = time.perf_counter()
        results.extend(run())
        print(f"{name}: {time.perf_counter() - t:.1f} s", flush=True)
    arch = gpu.arch if gpu is not None else ("cpu" if not cuda else "unknown")
    doc = {"gpu": info.get("gpu_name", "cpu"), "catalog_id": gpu.id if gpu else None, "arch": arch,
           "versions": info, "date": time.strftime("%Y-%m-%d"), "skipped_sections": skipped,
           "elapsed_s": time.perf_counter() - start, "results": results}
    out = args.out
    if out is None:
        slug = f"{arch}-{doc['gpu']}".lower().replace(" ", "-").replace("/", "-")
        out = MEASURED_DIR / f"{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print("\n".join(summary(results)))
    print(f"wrote {out} ({len(results)} measurements, {doc['elapsed_s']:.0f} s; skipped: {skipped or 'none'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
