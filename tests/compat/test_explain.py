# ruff: noqa: E501  (the samples are real messages; their line breaks follow the source, not the line limit)
"""`gpuplan explain` recognises the error families with real message samples and reads OOM numbers exactly.

Every sample below is a message as posted in the public thread named next to it (found through the
issues corpus; errors.md in the reference lists more), trimmed to the lines that matter.
"""

from __future__ import annotations

import pytest

from gpuplan.compat.explain import explain_error, family_ids
from gpuplan.units import GIB, MIB

SAMPLES = [
    # (family, thread, text)
    ("cuda-oom", "pytorch/pytorch#16417",
     "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of "
     "23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory in use. "
     "Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but "
     "unallocated. If reserved but unallocated memory is large try setting "
     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
     "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"),
    ("cuda-oom", "pytorch/pytorch#59778",
     "CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB total capacity; 781.59 MiB already "
     "allocated; 3.03 GiB free; 1.24 GiB reserved in total by PyTorch)"),
    ("no-kernel-image", "pytorch/pytorch#81883",
     "RuntimeError: CUDA error: no kernel image is available for execution on the device\nCUDA kernel errors "
     "might be asynchronously reported at some other API call,so the stacktrace below might be incorrect.\n"
     "For debugging consider passing CUDA_LAUNCH_BLOCKING=1."),
    ("arch-not-compatible", "FlyMyAI/flymyai-lora-trainer#47",
     "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
     "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n"
     "If you want to use the NVIDIA GeForce RTX 5090 GPU with PyTorch, please check the instructions at "
     "https://pytorch.org/get-started/locally/"),
    ("gpu-too-old", "w-okada/voice-changer#447",
     "UserWarning: Found GPU0 NVIDIA GeForce GT 720 which is of cuda capability 3.5.\n    PyTorch no longer "
     "supports this GPU because it is too old.\n    The minimum cuda capability supported by this library is 3.7."),
    ("driver-too-old", "S-3P-ERR-12080 (torch 2.11.0+cu130 log)",
     "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 12080). Please "
     "update your GPU driver by downloading and installing a new version from the URL: "
     "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to install a PyTorch "
     "version that has been compiled with your version of the CUDA driver. (Triggered internally at "
     "/pytorch/c10/cuda/CUDAFunctions.cpp:119.)"),
    ("driver-insufficient", "microsoft/human-pose-estimation.pytorch#23",
     "RuntimeError: cuda runtime error (35) : CUDA driver version is insufficient for CUDA runtime version at "
     "/pytorch/aten/src/THC/THCGeneral.cpp:74"),
    ("no-driver", "pytorch/pytorch#30664 (S-PT-CUDAFUNCTIONS text)",
     "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed "
     "a driver from http://www.nvidia.com/Download/index.aspx"),
    ("not-compiled-with-cuda", "pytorch/pytorch#110503",
     "    raise AssertionError(\"Torch not compiled with CUDA enabled\")\n"
     "AssertionError: Torch not compiled with CUDA enabled"),
    ("cuda-version-mismatch", "icip-cas/AutoAlign#25",
     "RuntimeError:\n      The detected CUDA version (11.8) mismatches the version that was used to compile\n"
     "      PyTorch (12.4). Please make sure to use the same CUDA versions."),
    ("cudnn", "pytorch/pytorch#119989",
     "Could not load library libcudnn_cnn_train.so.8. Error: /usr/local/cuda-12.3/lib64/libcudnn_cnn_train.so.8: "
     "undefined symbol: _ZN5cudnn3cnn34layerNormFwd_execute_internal_implERKNS_7backend11VariantPackEP11CUstream_st"
     "RKNS0_18LayerNormFwdParamsERKNS1_20NormForwardOperationEmb, version libcudnn_cnn_infer.so.8"),
    ("cudnn", "pytorch/pytorch#80637",
     "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 3, 2) but found runtime "
     "version (8, 0, 3). PyTorch already comes bundled with cuDNN."),
    ("nccl-timeout", "hiyouga/LlamaFactory#7396",
     "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) "
     "ran for 600060 milliseconds before timing out."),
    ("nccl-error", "NVIDIA-NeMo/Speech#833",
     "RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:535, unhandled system error, "
     "NCCL version 2.7.5"),
    ("nccl-error", "facebookresearch/SlowFast#535",
     "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, "
     "NCCL version 2.7.8\nncclSystemError: System call (socket, malloc, munmap, etc) failed"),
    ("cublas", "0nutation/SpeechGPT#37",
     "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx( handle, opa, opb, m, n, k, "
     "&falpha, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F, ldc, CUDA_R_32F, "
     "CUBLAS_GEMM_DFALT_TENSOR_OP)`"),
    ("device-side-assert", "layumi/Person_reID_baseline_pytorch#372",
     "/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:108: cunn_ClassNLLCriterion_updateOutput_kernel: block: "
     "[0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
     "    running_loss += loss.item() * now_batch_size\nRuntimeError: CUDA error: device-side assert triggered"),
    ("illegal-memory-access", "evo-design/evo#136",
     "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
     "asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging "
     "consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."),
    ("fork-reinit", "S-TORCH213 (_lazy_init text)",
     "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use "
     "the 'spawn' start method"),
    ("extension-abi", "S-3P-VLLM-ABI",
     "ImportError: /usr/local/lib/python3.12/dist-packages/vllm/_C.abi3.so: undefined symbol: "
     "_ZN3c1013MessageLoggerC1EPKciib"),
]


@pytest.mark.parametrize(("family", "thread", "text"), SAMPLES, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(SAMPLES)])
def test_family_is_recognised(family: str, thread: str, text: str) -> None:
    expl = explain_error(text)
    assert expl is not None, thread
    assert expl.family == family
    assert expl.cause and expl.fix


def test_at_least_12_families_have_real_samples() -> None:
    covered = {f for f, _, _ in SAMPLES}
    assert len(covered) >= 12
    assert covered <= set(family_ids())


def test_unrelated_text_is_not_recognised() -> None:
    assert explain_error("ValueError: too many values to unpack (expected 2)") is None
    assert explain_error("") is None


# --- OOM numbers ---------------------------------------------------------------------------------------

def test_current_oom_numbers_are_exact() -> None:
    # murong-xu/CADS#4
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity "
            "of 31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, this process has 18.73 GiB memory "
            "in use. Of the allocated memory 9.08 GiB is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch "
            "but unallocated.")
    expl = explain_error(text)
    assert expl is not None and expl.oom is not None and expl.oom_verdict is not None
    n = expl.oom
    assert n.tried_bytes == round(22.78 * GIB)
    assert n.device == 0
    assert n.total_bytes == round(31.47 * GIB)
    assert n.free_bytes == round(12.73 * GIB)
    assert n.process_in_use_bytes == round(18.73 * GIB)
    assert n.allocated_bytes == round(9.08 * GIB)
    assert n.reserved_unallocated_bytes == round(9.35 * GIB)
    assert n.format == "current"
    # 22.78 - 12.73 - 9.35 = 0.70 GiB had to be freed: not fragmentation alone
    v = expl.oom_verdict
    assert v.kind == "needs-less-memory"
    assert v.shortfall_bytes == round(22.78 * GIB) - round(12.73 * GIB) - round(9.35 * GIB)
    assert any("gpuplan fit" in a for a in v.actions)
    assert any("expandable_segments:True" in a for a in v.actions)  # 9.35 GiB reserved-unallocated is large


def test_fragmentation_points_to_expandable_segments() -> None:
    expl = explain_error(SAMPLES[0][2])  # pytorch#16417: 22 MiB request, 194.87 MiB reserved but unallocated
    assert expl is not None and expl.oom is not None and expl.oom_verdict is not None
    assert expl.oom.tried_bytes == 22 * MIB
    assert expl.oom.free_bytes == round(11.06 * MIB)
    assert expl.oom.reserved_unallocated_bytes == round(194.87 * MIB)
    assert expl.oom_verdict.kind == "fragmentation"
    assert "expandable_segments:True" in expl.oom_verdict.actions[0]
    # 22.90 of 23.65 GiB are live tensors: defragmenting leaves 11.06 MiB + 194.87 MiB = 205.93 MiB
    assert "only 205.93 MiB would be left" in expl.oom_verdict.actions[-1]


def test_21_era_typo_and_zero_bytes_free() -> None:
    # carolchenyx/MGFN.#35: "total capacty" (typo of the 2.1-era text) and "0 bytes is free"
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has a total capacty "
            "of 6.00 GiB of which 0 bytes is free. Of the allocated memory 2.93 GiB is allocated by PyTorch, and 2.30 "
            "GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "max_split_size_mb to avoid fragmentation.")
    expl = explain_error(text)
    assert expl is not None and expl.oom is not None and expl.oom_verdict is not None
    assert expl.oom.format == "2.1-typo"
    assert expl.oom.free_bytes == 0 and expl.oom.total_bytes == 6 * GIB
    assert expl.oom.reserved_unallocated_bytes == round(2.30 * GIB)
    assert expl.oom_verdict.kind == "fragmentation"  # 2.30 GiB cached-free >= 1.70 GiB request


def test_legacy_format_numbers() -> None:
    expl = explain_error(SAMPLES[1][2])  # pytorch#59778
    assert expl is not None and expl.oom is not None
    n = expl.oom
    assert n.format == "legacy"
    assert (n.tried_bytes, n.total_bytes, n.free_bytes) == (round(2.26 * GIB), 6 * GIB, round(3.03 * GIB))
    assert n.allocated_bytes == round(781.59 * MIB)
    assert n.reserved_unallocated_bytes == round(1.24 * GIB) - round(781.59 * MIB)
    assert expl.oom_verdict is not None and expl.oom_verdict.kind == "fragmentation"  # 3.03 GiB free > 2.26 GiB


@pytest.mark.parametrize(
    ("thread", "text", "tried_gib", "capacity_gib"),
    [
        ("wxian3/NeuroLens#2", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 55.57 GiB. GPU 0 "
         "has a total capacty of 12.00 GiB of which 9.02 GiB is free. Of the allocated memory 984.52 MiB is allocated "
         "by PyTorch, and 463.48 MiB is reserved by PyTorch but unallocated.", 55.57, 12.00),
        ("YingqianWang/iPASSR#9", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 10.73 GiB (GPU "
         "0; 8.00 GiB total capacity; 17.20 GiB already allocated; 0 bytes free; 19.15 GiB reserved in total by "
         "PyTorch)", 10.73, 8.00),
    ],
)
def test_request_larger_than_the_gpu(thread: str, text: str, tried_gib: float, capacity_gib: float) -> None:
    expl = explain_error(text)
    assert expl is not None and expl.oom_verdict is not None, thread
    assert expl.oom_verdict.kind == "larger-than-gpu"
    assert expl.oom_verdict.shortfall_bytes == round(tried_gib * GIB) - round(capacity_gib * GIB)


def test_details_read_from_messages() -> None:
    driver = explain_error(SAMPLES[5][2])
    assert driver is not None and any("CUDA up to 12.8" in d for d in driver.details)
    arch = explain_error(SAMPLES[3][2])
    assert arch is not None and "The GPU is sm_120." in arch.details
    assert any("ends at sm_90" in d for d in arch.details)
    nccl = explain_error(SAMPLES[12][2])
    assert nccl is not None and any("600 s" in d for d in nccl.details)


def test_other_processes_are_named_with_their_memory() -> None:
    # constructed in the current format with its optional process list (S-PT-CCA: "Process {pid} has {x}
    # memory in use"); no real sample with this clause was at hand
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 23.65 GiB "
            "of which 1.20 GiB is free. Process 4120 has 12.40 GiB memory in use. Including non-PyTorch memory, this "
            "process has 10.00 GiB memory in use. Of the allocated memory 9.10 GiB is allocated by PyTorch, and 300.00 MiB "
            "is reserved by PyTorch but unallocated.")
    expl = explain_error(text)
    assert expl is not None and expl.oom is not None and expl.oom_verdict is not None
    assert expl.oom.other_processes_bytes == round(12.40 * GIB)
    assert expl.oom_verdict.kind == "other-processes"
    assert "Other processes hold 12.40 GiB" in expl.oom_verdict.actions[0]


def test_hip_oom_is_the_same_family() -> None:
    # constructed in the ROCm wording of errors.md section 10 ("HIP out of memory ..."); numbers made up
    text = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 191.98 "
            "GiB of which 1.50 GiB is free. Of the allocated memory 180.00 GiB is allocated by PyTorch, and 8.00 GiB is "
            "reserved by PyTorch but unallocated.")
    expl = explain_error(text)
    assert expl is not None and expl.family == "cuda-oom" and expl.oom is not None
    assert expl.oom.total_bytes == round(191.98 * GIB)
    assert expl.oom_verdict is not None and expl.oom_verdict.kind == "fragmentation"


def test_reduce_memory_advice_says_otherwise_only_after_another_remedy() -> None:
    # legacy-format message of tests/golden/explain_oom.txt: no other process, little reserved-unallocated, so
    # reducing memory is the first remedy and must not open with "Otherwise"
    alone = explain_error("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.77 GiB total capacity; 13.20 GiB "
                          "already allocated; 1.50 GiB free; 13.50 GiB reserved in total by PyTorch)")
    assert alone is not None and alone.oom_verdict is not None
    assert alone.oom_verdict.actions[0].startswith("Reduce peak memory by at least 204.80 MiB")
    # with 9.35 GiB reserved-unallocated, expandable_segments comes first and the reduction is the alternative
    after = explain_error(SAMPLES_BY_THREAD_CADS4)
    assert after is not None and after.oom_verdict is not None
    first, second = after.oom_verdict.actions[:2]
    assert "expandable_segments:True" in first and second.startswith("Otherwise reduce peak memory")
    assert not any(a.startswith("Otherwise") for a in alone.oom_verdict.actions)


SAMPLES_BY_THREAD_CADS4 = (
    # murong-xu/CADS#4 (as in test_current_oom_numbers_are_exact)
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of 31.47 GiB "
    "of which 12.73 GiB is free. Including non-PyTorch memory, this process has 18.73 GiB memory in use. Of the "
    "allocated memory 9.08 GiB is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but unallocated.")
