"""The on-disk trace cache (trace/cache.py): exact round trips, hits, and entries never trusted blindly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpuplan.cli.main import main
from gpuplan.trace import step as step_module
from gpuplan.trace.cache import (
    CorruptEntry,
    TraceCache,
    decode_step,
    encode_step,
    trace_key,
    use_trace_cache,
)
from gpuplan.trace.capability import trace_cc_class
from gpuplan.trace.step import TracedStep, trace_step
from gpuplan.workload import Workload

REPO = Path(__file__).resolve().parents[2]
TRAIN = Workload(mode="train", batch_size=2, seq_len=32)


@pytest.fixture
def cache(tmp_path: Path) -> TraceCache:
    return TraceCache(tmp_path / "traces")


def _no_trace(*args: object, **kwargs: object) -> TracedStep:
    raise AssertionError("traced although the cache holds the step")


@pytest.mark.parametrize("workload", [TRAIN, Workload(mode="generate", batch_size=1, seq_len=16, new_tokens=8),
                                      Workload(mode="infer", batch_size=3, seq_len=16, precision="bf16")],
                         ids=["train", "generate", "infer"])
def test_a_stored_step_reads_back_equal_field_by_field(tiny_gpt2: str, workload: Workload) -> None:
    traced = trace_step(tiny_gpt2, workload)
    assert traced.run is not None and traced.ops
    assert decode_step(encode_step(traced)) == traced


def test_a_repeated_query_reads_the_cache_and_gives_the_same_step(tiny_gpt2: str, cache: TraceCache,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with use_trace_cache(cache):
        first = trace_step(tiny_gpt2, TRAIN)
        assert len(list(cache.directory.glob("*.trace"))) == 1
        monkeypatch.setattr(step_module, "_trace_source", _no_trace)
        again = trace_step(tiny_gpt2, TRAIN)
    assert again == first


def test_without_an_active_cache_nothing_is_read_or_written(tiny_gpt2: str, cache: TraceCache) -> None:
    trace_step(tiny_gpt2, TRAIN)
    assert not cache.directory.exists()


def test_gpus_that_pick_the_same_kernels_share_a_key_and_others_do_not(tiny_gpt2: str) -> None:
    from gpuplan.models.sources import resolve_model

    source = resolve_model(tiny_gpt2)
    h100, h200, a100, v100 = (9, 0), (9, 0), (8, 0), (7, 0)
    assert trace_key(source, TRAIN, h100) == trace_key(source, TRAIN, h200)
    assert trace_key(source, TRAIN, a100) == trace_key(source, TRAIN, (8, 6))  # both flash-capable
    assert trace_key(source, TRAIN, v100) != trace_key(source, TRAIN, a100)  # no flash attention on sm_70
    assert trace_cc_class(v100) == 50 and trace_cc_class(a100) == 80 and trace_cc_class((3, 5)) == 0
    assert trace_key(source, TRAIN, h100) != trace_key(source, TRAIN.with_(batch_size=3), h100)


def test_models_built_by_user_code_are_never_cached(tmp_path: Path) -> None:
    from gpuplan.models.sources import resolve_model

    factory = tmp_path / "net.py"
    factory.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 4)\n")
    assert trace_key(resolve_model(f"{factory}:make"), Workload(mode="infer"), (9, 0)) is None


def _stored_entry(cache: TraceCache, model: str) -> Path:
    with use_trace_cache(cache):
        trace_step(model, TRAIN)
    (entry,) = cache.directory.glob("*.trace")
    return entry


def _retrace_notes(cache: TraceCache, model: str) -> tuple[str, ...]:
    with use_trace_cache(cache):
        return trace_step(model, TRAIN).notes


def test_a_corrupt_entry_is_ignored_with_a_note_and_replaced(tiny_gpt2: str, cache: TraceCache) -> None:
    entry = _stored_entry(cache, tiny_gpt2)
    data = bytearray(entry.read_bytes())
    data[-5] ^= 0xFF  # one flipped bit in the payload: the checksum no longer matches
    entry.write_bytes(bytes(data))
    notes = _retrace_notes(cache, tiny_gpt2)
    assert any("ignored (its checksum does not match" in n for n in notes), notes
    assert TraceCache._parse(entry.read_bytes(), entry.stem) is not None  # a good entry is back


def test_a_truncated_or_empty_entry_is_ignored(tiny_gpt2: str, cache: TraceCache) -> None:
    entry = _stored_entry(cache, tiny_gpt2)
    entry.write_bytes(entry.read_bytes()[:100])
    assert any("traced again" in n for n in _retrace_notes(cache, tiny_gpt2))
    entry.write_bytes(b"")
    assert any("no header" in n for n in _retrace_notes(cache, tiny_gpt2))


def test_a_foreign_entry_is_never_trusted(tiny_gpt2: str, cache: TraceCache) -> None:
    entry = _stored_entry(cache, tiny_gpt2)
    other = Workload(mode="train", batch_size=3, seq_len=32)
    from gpuplan.models.sources import resolve_model

    other_key = trace_key(resolve_model(tiny_gpt2), other, (9, 0))
    assert other_key is not None
    (cache.directory / f"{other_key}.trace").write_bytes(entry.read_bytes())  # right format, wrong query
    with use_trace_cache(cache):
        answer = trace_step(tiny_gpt2, other)
    assert any("another query (foreign key)" in n for n in answer.notes), answer.notes
    fresh = trace_step(tiny_gpt2, other)
    assert {**_fields(answer), "notes": ()} == {**_fields(fresh), "notes": ()}


def _fields(step: TracedStep) -> dict[str, object]:
    return {name: getattr(step, name) for name in TracedStep.__dataclass_fields__}


@pytest.mark.parametrize("node", [
    {"t": "os.system", "f": {}},  # a type outside the allow-list
    {"t": "TracedStep", "f": {"ops": {"t": "tuple", "v": []}}},  # fields missing
    {"t": "columns", "of": "OpRecord", "as": "list", "c": {"name": ["a"]}},  # columns of the wrong shape
    ["not", "a", "record"],
])
def test_payloads_outside_the_format_are_refused(node: object) -> None:
    import zlib

    with pytest.raises(CorruptEntry):
        decode_step(zlib.compress(json.dumps(node).encode()))


def test_a_payload_that_expands_without_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import zlib

    from gpuplan.trace import cache as cache_module

    monkeypatch.setattr(cache_module, "_MAX_ENTRY_BYTES", 1024)  # expansion limit 8 KiB
    bomb = zlib.compress(b"[" * 2**20, 9)  # 1 MiB of brackets in about 1 KiB
    with pytest.raises(CorruptEntry, match="size limit"):
        decode_step(bomb)


def test_the_directory_stays_under_its_cap_least_recently_used_first(tiny_gpt2: str, tmp_path: Path) -> None:
    from gpuplan.models.sources import resolve_model

    source = resolve_model(tiny_gpt2)
    entry_bytes = _stored_entry(TraceCache(tmp_path / "probe"), tiny_gpt2).stat().st_size
    cache = TraceCache(tmp_path / "capped", max_bytes=int(entry_bytes * 2.5))
    keys = {b: f"{trace_key(source, TRAIN.with_(batch_size=b), (9, 0))}.trace" for b in (1, 2, 3)}
    with use_trace_cache(cache):
        trace_step(tiny_gpt2, TRAIN.with_(batch_size=1))
        trace_step(tiny_gpt2, TRAIN.with_(batch_size=2))
        os.utime(cache.directory / keys[2], (1, 1))  # batch 2: the least recently used
        trace_step(tiny_gpt2, TRAIN.with_(batch_size=3))
    assert sorted(p.name for p in cache.directory.glob("*.trace")) == sorted([keys[1], keys[3]])
    assert sum(p.stat().st_size for p in cache.directory.glob("*.trace")) <= cache.max_bytes


def test_concurrent_writers_of_one_key_leave_one_whole_entry(tiny_gpt2: str, cache: TraceCache) -> None:
    traced = trace_step(tiny_gpt2, TRAIN)
    key = "k" * 64
    threads = [threading.Thread(target=cache.store, args=(key, traced)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [p.name for p in cache.directory.iterdir()] == [f"{key}.trace"]  # no temporary file left behind
    assert cache.load(key).step == traced


def _cli_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main(argv)
    out = capsys.readouterr().out
    assert code in (0, 1), out
    result: dict[str, object] = json.loads(out)
    return result


def test_the_command_line_caches_by_default_and_no_cache_bypasses_it(
        tiny_gpt2: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "user-cache"
    monkeypatch.setenv("GPUPLAN_CACHE", "on")
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(directory))
    argv = ["estimate", tiny_gpt2, "--batch-size", "2", "--seq-len", "32", "--gpu", "H100-SXM", "--json"]
    missed = _cli_json([*argv, "--no-cache"], capsys)
    assert not directory.exists()
    stored = _cli_json(argv, capsys)
    assert len(list(directory.glob("*.trace"))) == 1
    monkeypatch.setattr(step_module, "_trace_source", _no_trace)
    hit = _cli_json([*argv[:-2], "H200", "--json"], capsys)  # another GPU of the same kernel class
    assert stored == missed
    assert hit["peak_allocated_bytes"] == stored["peak_allocated_bytes"]
    monkeypatch.setenv("GPUPLAN_CACHE", "off")
    assert main(argv) == 2  # off: traced (and here refused by the stand-in tracer)
    assert "traced although" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("verb", [["estimate", "--seq-len", "32", "--gpu", "H100-SXM"],
                                  ["plan", "--seq-len", "32", "--gpu", "H100-SXM", "--gpus", "2"],
                                  ["fit", "--gpu", "T4", "--axis", "seq-len"],
                                  ["serve", "--gpu", "L4", "--max-model-len", "64"]], ids=lambda v: v[0])
def test_a_cache_hit_does_not_import_torch(tiny_gpt2: str, tmp_path: Path, verb: list[str]) -> None:
    """Old main: a cached plan imported torch (37 s on a busy machine) through transformers' AutoConfig, read
    for the layer counts, and a cached ``fit --axis seq-len`` built a block for the position table; both are
    cached beside the traces (trace/cache.model_fact). A cached ``serve`` read transformers' full config
    (``hf_config().to_dict()``) every time (6.4 s of CPU for llama-3.1-8b): kept there too (hf_config_dict_of)."""
    env = {**os.environ, "GPUPLAN_CACHE": "on", "GPUPLAN_CACHE_DIR": str(tmp_path / "c"),
           "PYTHONPATH": str(REPO / "src")}
    argv = [verb[0], tiny_gpt2, *verb[1:], "--json"]
    probe = ("import sys, io, contextlib; from gpuplan.cli.main import main\n"
             "with contextlib.redirect_stdout(io.StringIO()): code = main(sys.argv[1:])\n"
             "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)")
    first = subprocess.run([sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True, check=True)
    assert first.stdout.split() == ["0", "True", "True"], first.stderr
    second = subprocess.run([sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True, check=True)
    assert second.stdout.split() == ["0", "False", "False"], second.stderr


def test_layer_counts_are_cached_beside_the_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' reading of the layer counts is kept per model and library versions; a damaged entry is
    read again, never trusted."""
    from gpuplan.models.sources import HFConfigSource
    from gpuplan.trace.cache import fact_key, layer_counts_of

    source = HFConfigSource("tiny", {"model_type": "gpt2", "n_layer": 5, "n_embd": 32, "n_head": 2,
                                     "vocab_size": 100, "n_positions": 64})
    cache = TraceCache(tmp_path / "c")
    with use_trace_cache(cache):
        assert layer_counts_of(source) == {"num_hidden_layers": 5} == source.layer_counts()
        monkeypatch.setattr(HFConfigSource, "layer_counts", lambda self: pytest.fail("read the config again"))
        assert layer_counts_of(source) == {"num_hidden_layers": 5}
        key = fact_key(source, "layer_counts")
        assert key is not None
        entry = cache.directory / f"{key}.facts"
        entry.write_text(entry.read_text().replace("5", "-5"))
        monkeypatch.setattr(HFConfigSource, "layer_counts", lambda self: {"num_hidden_layers": 5})
        assert layer_counts_of(source) == {"num_hidden_layers": 5} and "-5" not in entry.read_text()


def test_the_full_config_reading_is_cached_and_a_damaged_one_read_again(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuplan.models.sources import HFConfigSource
    from gpuplan.trace.cache import fact_key, hf_config_dict_of

    source = HFConfigSource("tiny", {"model_type": "gpt2", "n_layer": 5, "n_embd": 32, "n_head": 2,
                                     "vocab_size": 100, "n_positions": 64})
    full = json.loads(json.dumps(source.hf_config().to_dict()))  # as JSON: id2label's keys are strings
    cache = TraceCache(tmp_path / "c")
    with use_trace_cache(cache):
        assert hf_config_dict_of(source) == full and full["n_inner"] is None  # a class default filled in
        monkeypatch.setattr(HFConfigSource, "hf_config", lambda self: pytest.fail("read the config again"))
        assert hf_config_dict_of(source) == full
        key = fact_key(source, "hf_config")
        assert key is not None
        entry = cache.directory / f"{key}.facts"
        entry.write_text(entry.read_text().replace('{"config": {', '{"config": [{', 1))
        monkeypatch.undo()
        assert hf_config_dict_of(source) == full and '"config": {' in entry.read_text()
