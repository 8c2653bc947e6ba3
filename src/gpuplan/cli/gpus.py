"""``gpuplan gpus``: list, show and compare catalog GPUs.

    gpuplan gpus [--arch A] [--vendor V] [--min-memory-gib X] [--dtype D] [--tier T] [--mig]
                 [--sort KEY] [--json]
    gpuplan gpus show GPU [--json]
    gpuplan gpus compare GPU GPU [...] [--json]

Exit codes: 0 ok, 1 when no GPU passes the filters, 2 on bad input (unknown GPU, bad flag).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence

from gpuplan.cli._workload import _float
from gpuplan.errors import ConfigError
from gpuplan.hardware import DTYPES, GPU, TIERS, get_gpu, list_gpus
from gpuplan.hardware.catalog import SORT_KEYS

ACTIONS = ("list", "show", "compare")
CONVENTIONS = {
    "tensor_rates": "dense (no 2:4 sparsity), FP32 accumulate: the rate PyTorch matmuls get",
    "tf32": "used by PyTorch matmuls only when enabled (torch.backends.cuda.matmul.allow_tf32 "
    "is False by default)",
    "fp32_accumulate_half_rate": "GeForce: FP16/BF16 (and FP8) with FP32 accumulate run at half "
    "the FP16-accumulate rate",
    "memory": "memory_total_bytes is nvidia-smi's Total (binary bytes); memory_labelled_gb is the "
    "vendor label",
    "bandwidth": "decimal GB/s; interconnect figures are per GPU",
}


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", default="list", metavar="ACTION",
                        help="list (default), show GPU, or compare GPU GPU ...")
    parser.add_argument("names", nargs="*", metavar="GPU", help="GPU names for show / compare")
    parser.add_argument("--arch", help="architecture, or part of it (hopper, ada, blackwell, cdna 3, ...)")
    parser.add_argument("--vendor", help="nvidia, amd, intel or apple")
    parser.add_argument("--min-memory-gib", type=_float, metavar="X", help="at least X GiB of GPU memory")
    parser.add_argument("--dtype", choices=DTYPES, help="only GPUs that run this dtype natively")
    parser.add_argument("--tier", choices=TIERS, help="entry, research or enterprise (rule in docs/gpus.md)")
    parser.add_argument("--sort", choices=SORT_KEYS, default="name", help="order of the list (default: name)")
    parser.add_argument("--mig", action="store_true", help="also list every MIG slice of MIG-capable GPUs")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    action = args.action
    if action not in ACTIONS:
        hint = f"; to see one GPU: gpuplan gpus show {action}" if not args.names else ""
        raise ConfigError(f"unknown gpus action {action!r} (allowed: {', '.join(ACTIONS)}){hint}")
    if action == "list":
        if args.names:
            got = ", ".join(args.names)
            raise ConfigError(f"`gpuplan gpus` takes no GPU names (got {got}); use show or compare")
        return _list(args)
    _note_list_only_flags(args)
    if action == "show":
        if len(args.names) != 1:
            raise ConfigError("`gpuplan gpus show` takes exactly one GPU, e.g. gpuplan gpus show H100-SXM")
        gpu = get_gpu(args.names[0])
        _emit(args, {"gpu": gpu.to_dict(), "conventions": CONVENTIONS}, lambda: render_card(gpu))
        return 0
    if len(args.names) < 2:
        raise ConfigError("`gpuplan gpus compare` needs two or more GPUs, e.g. compare H100 A100-80GB-SXM")
    gpus = [get_gpu(name) for name in args.names]
    payload = {"gpus": [g.to_dict() for g in gpus], "conventions": CONVENTIONS}
    _emit(args, payload, lambda: render_compare(gpus))
    return 0


# Filters and order shape the list only; show and compare name their GPUs.
_LIST_ONLY = ("arch", "vendor", "min_memory_gib", "dtype", "tier")


def _note_list_only_flags(args: argparse.Namespace) -> None:
    given = [f"--{f.replace('_', '-')}" for f in _LIST_ONLY if getattr(args, f) is not None]
    given += ["--sort"] if args.sort != "name" else []
    given += ["--mig"] if args.mig else []
    notes = getattr(args, "notes", None)
    if given and isinstance(notes, list):
        notes.append(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to the list only; "
                     f"ignored by `gpuplan gpus {args.action}`")


def _list(args: argparse.Namespace) -> int:
    gpus = list_gpus(vendor=args.vendor, arch=args.arch, min_memory_gib=args.min_memory_gib, dtype=args.dtype,
                     tier=args.tier, sort=args.sort, include_mig=args.mig, include_packages=True)
    filters = {"vendor": args.vendor, "arch": args.arch, "min_memory_gib": args.min_memory_gib,
               "dtype": args.dtype, "tier": args.tier, "mig": args.mig}
    payload = {"count": len(gpus), "filters": filters, "sort": args.sort,
               "gpus": [g.to_dict() for g in gpus], "conventions": CONVENTIONS}
    if not gpus and not args.json:
        print("no catalog GPU passes these filters")
        return 1
    _emit(args, payload, lambda: render_list(gpus, dtype=args.dtype))
    return 0 if gpus else 1


def _emit(args: argparse.Namespace, payload: Mapping[str, object], text: Callable[[], str]) -> None:
    print(json.dumps(payload, indent=2) if args.json else text())


# ---- text rendering -------------------------------------------------------------------------------

def _num(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if isinstance(value, float) and value % 1 else f"{value:,.0f}"


def _usd(value: int | None) -> str:
    return "-" if value is None else f"${value:,}"


def _cc(g: GPU) -> str:
    """Table cells stay short: '-' where there is none (the card spells it out)."""
    return "-" if g.compute_capability is None else g.compute_capability_label


def _link_name(g: GPU) -> str:
    if g.intra_node_link not in ("pcie", "none") and not g.interconnect_gb_per_s_bidirectional:
        return f"{g.intra_node_link} of undocumented bandwidth, PCIe figure shown"
    return g.intra_node_link


def _rate(dtype: str) -> Callable[[GPU], str]:
    return lambda g: _num(g.peak_tflops(dtype))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in pairs)

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]).rstrip()


def render_list(gpus: Sequence[GPU], *, dtype: str | None = None) -> str:
    rate_cols = ["bf16", "fp8"] + ([dtype] if dtype and dtype not in ("bf16", "fp8") else [])
    header = ["id", "vendor", "arch", "memory GiB", "bandwidth GB/s",
              *(f"{d} TFLOPS" if d != "int8" else "int8 TOPS" for d in rate_cols), "tier", "launch USD"]
    rows = []
    for g in gpus:
        star = "*" if g.fp32_accumulate_half_rate else ""
        rates = [_num(g.peak_tflops(d)) + (star if d in ("fp16", "bf16", "fp8") and g.peak_tflops(d) else "")
                 for d in rate_cols]
        rows.append([g.id, g.vendor_key, g.arch, f"{g.memory_gib:.1f}", _num(g.memory_bandwidth_gb_per_s),
                     *rates, g.tier, _num(g.launch_price_usd)])
    table = _table(header, rows, right=set(range(3, len(header) - 1)) | {len(header) - 1})
    foot = (f"{len(gpus)} GPUs. TFLOPS are dense, FP32 accumulate (what PyTorch matmuls get). "
            "* GeForce: half the FP16-accumulate rate. Memory is nvidia-smi's total, in GiB.")
    return f"{table}\n\n{foot}"


def render_card(g: GPU) -> str:
    lines = [f"{g.id}  {g.name}", ""]
    lines += [f"  vendor / arch      {g.vendor} / {g.arch} ({g.chip or '-'}), "
              f"compute capability {g.compute_capability_label}",
              f"  segment / tier     {g.segment} / {g.tier}",
              f"  form factor        {g.form_factor or '-'}, TDP {_num(g.tdp_w)} W, "
              f"released {g.release_year or '-'}, launch price {_usd(g.launch_price_usd)}",
              f"  memory             {g.memory_gib:.2f} GiB total ({g.memory_total_bytes:,} bytes), labelled "
              f"{_num(g.memory_labelled_gb)} GB {g.memory_type or ''}".rstrip(),
              f"                     total from: {g.memory_total_source}"]
    if g.cuda_total_memory_bytes:
        usable = g.cuda_total_memory_bytes / 2**30
        lines.append(f"  usable by CUDA     {usable:.2f} GiB ({g.cuda_total_memory_source})")
    lines.append(f"  bandwidth          {_num(g.memory_bandwidth_gb_per_s)} GB/s")
    lines.append("  compute, dense, FP32 accumulate (TFLOPS; int8 in TOPS):")
    lines.append("    " + "   ".join(f"{d} {_num(g.peak_tflops(d))}" for d in DTYPES))
    if g.tf32_tflops:
        lines.append("    tf32 only where TF32 is enabled; PyTorch fp32 matmuls default to the fp32 rate")
    if g.fp32_accumulate_half_rate:
        lines.append(f"    GeForce: FP32-accumulate at half rate; FP16-accumulate rates fp16 "
                     f"{_num(g.fp16_fp16acc_tflops)}, fp8 {_num(g.fp8_fp16acc_tflops)} (unused by PyTorch)")
    lines.append(f"  interconnect       {g.interconnect or '-'}")
    link = g.intra_node_gb_per_s_per_direction
    pcie = _num(g.pcie_gb_per_s_per_direction)
    lines.append(f"                     GPU-GPU {_num(link)} GB/s per direction via {_link_name(g)}; "
                 f"PCIe Gen{g.pcie_gen or '-'} x{g.pcie_lanes or '-'} {pcie} GB/s per direction")
    if g.mig_profiles:
        lines.append(f"  MIG profiles       (up to {g.mig_max_instances} instances; source: {g.mig_source})")
        for p in g.mig_profiles:
            lines.append(f"    {g.id}:{p.name:<9} {p.memory_bytes / 2**30:6.2f} GiB  "
                         f"{p.compute_slices}/{p.max_compute_slices} of SMs  up to {p.max_instances}")
    lines += ["", f"  names              {', '.join(g.aliases) or '-'}"]
    if g.shorthands:
        lines.append(f"  shorthand for      {', '.join(g.shorthands)}")
    lines += [f"  source             {g.source}", f"  verification       {g.verification or '-'}"]
    if g.derived_fields:
        lines.append(f"  derived fields     {g.derived_fields}")
    if g.notes:
        lines.append(f"  notes              {g.notes}")
    lines.append(f"  retrieved          {g.retrieved} ({g.reference})")
    return "\n".join(lines)


_COMPARE_ROWS: list[tuple[str, Callable[[GPU], str]]] = [
    ("arch", lambda g: g.arch),
    ("compute capability", lambda g: _cc(g)),
    ("memory GiB", lambda g: f"{g.memory_gib:.1f}"),
    ("bandwidth GB/s", lambda g: _num(g.memory_bandwidth_gb_per_s)),
    *((f"{d} {'TOPS' if d == 'int8' else 'TFLOPS'}", _rate(d)) for d in DTYPES),
    ("FP32-acc half rate", lambda g: "yes" if g.fp32_accumulate_half_rate else "no"),
    ("GPU-GPU GB/s/dir", lambda g: f"{_num(g.intra_node_gb_per_s_per_direction)} ({_link_name(g)})"),
    ("TDP W", lambda g: _num(g.tdp_w)),
    ("MIG instances", lambda g: _num(g.mig_max_instances)),
    ("tier", lambda g: g.tier),
    ("launch USD", lambda g: _num(g.launch_price_usd)),
    ("released", lambda g: str(g.release_year or "-")),
]


def render_compare(gpus: Sequence[GPU]) -> str:
    header = ["", *(g.id for g in gpus)]
    rows = [[label, *(value(g) for g in gpus)] for label, value in _COMPARE_ROWS]
    note = "Tensor rates dense, FP32 accumulate. Memory is nvidia-smi's total in GiB; bandwidth decimal GB/s."
    return _table(header, rows, right=set(range(1, len(header)))) + "\n\n" + note
