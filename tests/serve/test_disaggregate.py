"""Issue 20 item 3: ``serve ... --disaggregate P:D | auto``: prefill and decode pools of one layout, the
prompt's KV moved between them, goodput per GPU against the aggregated engine. Tiny Llama of test_serve_v2."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.serve.disaggregate import disaggregate
from tests.serve import test_serve_v2
from tests.serve.test_serve_v2 import SMALL_ARGS, run

IO = {"input_len": 300, "output_len": 100}
tiny_llama = test_serve_v2.tiny_llama  # the module fixture, shared by name


@settings(max_examples=6, deadline=None)
@given(tokens=st.sampled_from([256, 2048]), seqs=st.sampled_from([16, 64]), tp=st.sampled_from([1, 2]),
       utilization=st.sampled_from([0.5, 0.9]))
def test_disaggregation_never_less_kv_per_decode_gpu(tiny_llama: str, tokens: int, seqs: int, tp: int,
                                                     utilization: float) -> None:
    d = disaggregate(tiny_llama, gpu="H100-SXM", split="1:1", tp=tp, max_num_batched_tokens=tokens, max_num_seqs=seqs,
                     gpu_memory_utilization=utilization, **IO)
    assert d.decode.settings.max_num_batched_tokens == min(tokens, seqs)
    assert d.decode.budget.total_bytes == d.aggregated.budget.total_bytes
    assert d.decode.budget.kv_cache_bytes >= d.aggregated.budget.kv_cache_bytes


def test_kv_transfer_bytes_and_time_over_the_network(tiny_llama: str) -> None:
    # instances of 8 GPUs (tp 2 × dp 4): a prefill and a decode instance sit on two nodes, each rank sends its
    # shard over its own NIC: Hopper 400 Gb/s × 0.85 bus efficiency, one Simple network hop of 14 µs (NCCL's model)
    d = disaggregate(tiny_llama, gpu="H100-SXM", split="1:1", tp=2, dp=4, max_num_batched_tokens=256,
                     max_num_seqs=16, **IO)
    per_gpu = d.aggregated.kv.sequence_bytes(300)
    assert per_gpu == -(-300 // 16) * 16 * 2 * 2 * 1 * 16 * 2  # pages × 2 layers × K,V × 1 head per rank × 16 × bf16
    assert d.kv_transfer_bytes_per_request == per_gpu * 2
    assert d.link.startswith("network")
    assert d.kv_transfer_s == pytest.approx(per_gpu / (400e9 / 8 * 0.85) + 14e-6)
    assert d.ttft_s == pytest.approx(d.aggregated.prefill.seconds + d.kv_transfer_s)
    one_node = disaggregate(tiny_llama, gpu="H100-SXM", split="1:1", tp=2, max_num_batched_tokens=256,
                            max_num_seqs=16, **IO)
    assert one_node.link.startswith("nvlink") and one_node.kv_transfer_s < d.kv_transfer_s


def test_auto_sizes_the_fewest_instances_for_the_rate_and_ttft_target(tiny_llama: str) -> None:
    free = disaggregate(tiny_llama, gpu="H100-SXM", split="auto", rate=2000.0, max_num_batched_tokens=256,
                        max_num_seqs=16, **IO)
    p, d = free.prefill_instances, free.decode_instances
    assert (p - 1) * free.prefill_requests_per_s_per_instance <= 2000 < p * free.prefill_requests_per_s_per_instance
    assert (d - 1) * free.decode_requests_per_s_per_instance <= 2000 < d * free.decode_requests_per_s_per_instance
    assert free.ok and free.requests_per_s == 2000
    assert free.goodput_tokens_per_s_per_gpu == pytest.approx(2000 * 100 / free.gpus)
    # the pools' capacity is above the rate: the interval's top is held at the rate, like the goodput
    low, high = free.goodput_interval or (0.0, 0.0)
    assert low <= free.goodput_tokens_per_s_per_gpu == pytest.approx(high)
    # a TTFT target just above the prefill + transfer: more prefill instances until the p99 wait fits
    target = free.ttft_s * 1.05
    tight = disaggregate(tiny_llama, gpu="H100-SXM", split="auto", rate=2000.0, ttft_slo=target,
                         max_num_batched_tokens=256, max_num_seqs=16, **IO)
    assert tight.prefill_instances > p and tight.ttft_p99_s is not None and tight.ttft_p99_s <= target
    assert tight.ok


def test_cli_json_commands_and_bad_split(tiny_llama: str) -> None:
    code, out, _ = run(tiny_llama, "--gpu", "H100-SXM", "--input-len", "300", "--output-len", "100", "--disaggregate",
                       "1:3", "--json", *SMALL_ARGS)
    data = json.loads(out)["disaggregation"]
    assert code == 0 and (data["prefill_instances"], data["decode_instances"], data["gpus"]) == (1, 3, 4)
    assert data["requests_per_s"] == pytest.approx(min(data["prefill_requests_per_s_per_instance"],
                                                       3 * data["decode_requests_per_s_per_instance"]))
    # 80% interval: the pools' request rates are work over the modelled times, so it is the serving family's
    # time interval (the step's, in the same JSON) inverted: low where the times run long
    step = json.loads(out)["decode"]
    low, high = data["goodput_interval_tokens_per_s_per_gpu"]
    goodput = data["goodput_tokens_per_s_per_gpu"]
    assert low <= goodput <= high
    assert low / goodput == pytest.approx(step["step_s"] / step["step_interval_s"][1])
    assert high / goodput == pytest.approx(step["step_s"] / step["step_interval_s"][0])
    assert '"kv_connector": "NixlConnector"' in data["decode_command"]
    assert "--max-num-batched-tokens 16 " in data["decode_command"]
    code, out, _ = run(tiny_llama, "--gpu", "H100-SXM", "--engine", "sglang", "--input-len", "300", "--output-len",
                       "100", "--disaggregate", "2:1", "--json", *SMALL_ARGS)
    data = json.loads(out)["disaggregation"]
    assert data["prefill_command"].endswith("--disaggregation-mode prefill")
    assert data["decode_command"].endswith("--disaggregation-mode decode")
    assert math.isfinite(data["aggregated_goodput_tokens_per_s_per_gpu"])


@pytest.mark.parametrize("argv, message", [
    (["--disaggregate", "3", "--input-len", "30", "--output-len", "10"], "--disaggregate '3': give P:D"),
    (["--disaggregate", "0:2", "--input-len", "30", "--output-len", "10"], "give P:D"),
    (["--disaggregate", "auto", "--input-len", "30", "--output-len", "10"], "add --rate R"),
    (["--disaggregate", "1:1"], "needs --input-len and --output-len"),
    (["--disaggregate", "1:1", "--gpus", "2", "--input-len", "30", "--output-len", "10"], "not --gpus"),
    (["--disaggregate", "1:1", "--engine", "hf", "--input-len", "30", "--output-len", "10"], "--engine vllm or sglang"),
])
def test_bad_disaggregate_is_one_line_exit_2(tiny_llama: str, argv: list[str], message: str) -> None:
    code, out, err = run(tiny_llama, "--gpu", "H100-SXM", *argv, *SMALL_ARGS)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1
