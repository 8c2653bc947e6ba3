"""Name resolution: how people type GPUs and how nvidia-smi / torch print them."""

from __future__ import annotations

import pytest

from gpuplan.errors import UnknownGPUError
from gpuplan.hardware import all_gpus, get_gpu
from gpuplan.hardware.names import NameIndex, tokens


@pytest.mark.parametrize(
    ("name", "gpu_id"),
    [
        # ids, any case
        ("H100-SXM", "H100-SXM"), ("h100-sxm", "H100-SXM"), ("a100-80gb-sxm", "A100-80GB-SXM"),
        # nvidia-smi / torch.cuda.get_device_name() spellings
        ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB-SXM"), ("NVIDIA A100-SXM4-40GB", "A100-40GB-SXM"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"), ("NVIDIA A100-PCIE-40GB", "A100-40GB-PCIe"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("NVIDIA GeForce RTX 3090", "RTX-3090"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"), ("Tesla V100-PCIE-32GB", "V100-PCIe-32GB"),
        ("Tesla T4", "T4"), ("NVIDIA A10G", "A10G"), ("NVIDIA L4", "L4"), ("NVIDIA H200", "H200-SXM"),
        ("NVIDIA RTX A6000", "RTX-A6000"), ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"),
        ("AMD Instinct MI300X", "MI300X"),
        # how people type them
        ("H100", "H100-SXM"), ("h100", "H100-SXM"), ("H200", "H200-SXM"), ("A100-80GB", "A100-80GB-SXM"),
        ("RTX 4090", "RTX-4090"), ("rtx4090", "RTX-4090"), ("4090", "RTX-4090"), ("3090 Ti", "RTX-3090-Ti"),
        ("A100 SXM4 80GB", "A100-80GB-SXM"), ("H100 PCIe", "H100-PCIe"), ("l40s", "L40S"),
        ("a6000", "RTX-A6000"), ("mi300x", "MI300X"), ("Gaudi 3", "Gaudi3"), ("gaudi3", "Gaudi3"),
        ("M3 Max", "M3-Max"), ("t4", "T4"),
        ("  H100-SXM  ", "H100-SXM"),
    ],
)
def test_names_resolve(name: str, gpu_id: str) -> None:
    assert get_gpu(name).id == gpu_id


def test_every_id_alias_and_shorthand_resolves_to_its_own_gpu() -> None:
    for gpu in all_gpus():
        # a package's vendor name is what torch prints for each of its devices (next test)
        name = (gpu.name,) if gpu.devices_per_package == 1 else ()
        for text in (gpu.id, gpu.id.lower(), gpu.id.upper(), *name, *gpu.aliases, *gpu.shorthands):
            assert get_gpu(text).id == gpu.id, text


def test_torch_names_of_two_die_packages_resolve_to_one_die() -> None:
    # torch.cuda.get_device_name() on an MI250X node prints the package name for each 64 GB GCD
    gcd, package = get_gpu("AMD Instinct MI250X"), get_gpu("MI250X-OAM")
    assert gcd.id == "MI250X" and gcd.devices_per_package == 1 and package.devices_per_package == 2
    assert gcd.memory_total_bytes * 2 == package.memory_total_bytes
    assert gcd.peak_tflops("bf16") == 191.5 and package.peak_tflops("bf16") == 383.0
    assert gcd.memory_bandwidth_gb_per_s == package.memory_bandwidth_gb_per_s / 2
    assert get_gpu("AMD Instinct MI250").id == "MI250"


@pytest.mark.parametrize(
    ("name", "gpu_id", "profile"),
    [
        ("A100-80GB-SXM:1g.10gb", "A100-80GB-SXM", "1g.10gb"),
        ("A100-80GB 3g.40gb", "A100-80GB-SXM", "3g.40gb"),
        ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "A100-80GB-SXM", "3g.40gb"),  # torch's name for a MIG device
        ("MIG 1g.5gb A100-40GB-SXM", "A100-40GB-SXM", "1g.5gb"),
        ("h100:7G.80GB", "H100-SXM", "7g.80gb"),
        ("A30 2g.12gb", "A30", "2g.12gb"),
        ("H200 1g.18gb", "H200-SXM", "1g.18gb"),
    ],
)
def test_mig_names_resolve_to_slices(name: str, gpu_id: str, profile: str) -> None:
    gpu = get_gpu(name)
    assert gpu.id == f"{gpu_id}:{profile}"
    assert gpu.mig_parent == gpu_id and gpu.mig_profile == profile


def test_every_mig_profile_resolves_by_id() -> None:
    for gpu in all_gpus():
        for p in gpu.mig_profiles:
            assert get_gpu(f"{gpu.id}:{p.name}").memory_total_bytes == p.memory_bytes


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("A100", r"ambiguous GPU 'A100': it matches A100-40GB-PCIe, A100-40GB-SXM, A100-80GB-PCIe, "
                 r"A100-80GB-SXM"),
        ("V100", r"ambiguous GPU 'V100': it matches .*V100-SXM2-16GB.*V100-SXM2-32GB"),
        ("RTX 6000", r"ambiguous GPU 'RTX 6000': it matches .*RTX-6000-Ada.*RTX-PRO-6000"),
        ("GH200", r"ambiguous GPU 'GH200': it matches GH200-144GB, GH200-96GB"),
        ("H100-SMX", r"unknown GPU 'H100-SMX'; did you mean H100-SXM"),
        ("RTX 4090 D", r"unknown GPU 'RTX 4090 D'; did you mean RTX-4090"),
        ("TPU v5e", r"unknown GPU 'TPU v5e'"),
        ("NVIDIA", r"unknown GPU 'NVIDIA'"),
        ("", r"empty GPU name"),
        ("T4:1g.5gb", r"T4 does not support MIG"),
        ("A100-80GB-SXM:2g.5gb", r"A100-80GB-SXM has no MIG profile '2g.5gb'; its profiles: 1g.10gb, "),
        ("1g.10gb", r"MIG profile '1g.10gb' needs a GPU, e.g. A100-80GB-SXM:1g.10gb"),
        ("A100 1g.10gb", r"ambiguous GPU 'A100 1g.10gb': it matches A100-40GB-PCIe:1g.10gb"),
        # only the two 40GB parts have 1g.5gb, and they are still two
        ("A100 1g.5gb", r"ambiguous GPU 'A100 1g.5gb': it matches A100-40GB-PCIe:1g.5gb, "
                        r"A100-40GB-SXM:1g.5gb;"),
        ("H100-SMX:1g.10gb", r"unknown GPU 'H100-SMX'; did you mean H100-SXM"),
    ],
)
def test_bad_names_fail_in_one_line(name: str, message: str) -> None:
    with pytest.raises(UnknownGPUError, match=message) as info:
        get_gpu(name)
    assert "\n" not in str(info.value)


def test_unknown_gpu_error_is_a_key_error_with_a_clean_message() -> None:
    with pytest.raises(KeyError) as info:
        get_gpu("H100-SMX")
    assert str(info.value).startswith("unknown GPU")  # not KeyError's quoted repr


def test_tokens_ignore_case_separators_and_vendor_words() -> None:
    assert tokens("NVIDIA GeForce RTX-4090") == tokens("rtx4090") == ("rtx", "4090")
    assert tokens("A100-SXM4-80GB") == tokens("a100 sxm 80gb")


def test_index_rejects_a_name_claimed_by_two_gpus() -> None:
    a, b = get_gpu("RTX-4090"), get_gpu("RTX-3090")
    import dataclasses

    clash = dataclasses.replace(b, aliases=("RTX 4090",))
    with pytest.raises(ValueError, match="claimed by both RTX-4090 and RTX-3090"):
        NameIndex.build([a, clash])


def test_an_exact_id_is_the_record_the_index_gives() -> None:
    """get_gpu reads a GPU named by its exact id from its own file (issue 19 item 4: all 73 files took ~0.1 s of
    every command); that is the very record the name index resolves the id to, for every id."""
    from gpuplan.hardware.catalog import _index

    index = NameIndex.build(all_gpus())
    for gpu in all_gpus():
        assert get_gpu(gpu.id) is gpu is index.resolve(gpu.id) is _index().resolve(gpu.id)


def test_an_exact_id_reads_one_file() -> None:
    """In a fresh process, resolving an id parses its file alone; any other spelling builds the index."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    probe = ("from gpuplan.hardware import catalog\n"
             "catalog.get_gpu('A100-80GB-SXM')\n"
             "print(catalog._gpu_in_file.cache_info().currsize, catalog._index.cache_info().currsize)\n"
             "catalog.get_gpu('a100-80gb-sxm')\n"
             "print(catalog._gpu_in_file.cache_info().currsize == len(catalog.all_gpus()))\n")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    assert out == ["1", "0", "True"]
