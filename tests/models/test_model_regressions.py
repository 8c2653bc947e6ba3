"""Issue #9 items 11, 13 (T5 tying), 21 and 22, and the ``gpuplan models`` verb: each test failed on
the commit before the fix (67ecafa)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gpuplan.cli.main import main
from gpuplan.errors import ConfigError, ModelSourceError, TraceError
from gpuplan.estimate import estimate
from gpuplan.models.catalog import catalog_models
from gpuplan.models.sources import HFConfigSource, resolve_model
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_BERT, TINY_GPT2, TINY_LLAMA, TINY_T5


@pytest.fixture(autouse=True)
def _no_user_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLAN_CALIBRATION", "off")


def _config(tmp_path: Path, config: dict[str, object]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


# ---------------------------------------------------------------------------------- item 11 ----

@pytest.mark.slow
def test_gpt2_longer_than_its_position_table_is_refused() -> None:
    """Old main: gpt2 at 4096 "fits" (fake tensors never bounds-check the wpe lookup)."""
    with pytest.raises(ConfigError, match=r"learned position table 'transformer.wpe' holds 1,024 "
                                          r"\(n_positions = 1,024\).*--seq-len 1,024 or less"):
        estimate("gpt2", mode="infer", batch_size=1, seq_len=4096)


def test_default_prompt_leaves_room_for_the_new_tokens(tmp_path: Path) -> None:
    """A default never makes a run impossible: with no --seq-len, generation's prompt is shortened so that
    prompt + new tokens fit the learned table (n_positions = 128, 29 new tokens → a 100-token prompt).
    The lead's fix after H6's refusal of `gpuplan estimate gpt2 --mode generate` (1,024 + 128 > 1,024)."""
    from gpuplan.perf.summary import seq_len_of
    from gpuplan.workload import Workload

    path = _config(tmp_path, TINY_GPT2)
    workload = Workload(mode="generate", batch_size=1, new_tokens=29)
    assert seq_len_of(resolve_model(str(path)), workload) == 100
    assert estimate(path, workload=workload).params_count > 0
    assert seq_len_of(resolve_model("gpt2"), Workload(mode="generate")) == 1024 - 127
    with pytest.raises(ConfigError, match=r"use fewer --new-tokens"):
        estimate(path, mode="generate", batch_size=1, new_tokens=200)


def test_bert_longer_than_its_position_table_is_refused(tmp_path: Path) -> None:
    """Old main: BERT at 8192 is a cryptic shape error from the position-ids buffer."""
    with pytest.raises(ConfigError, match=r"sequence length 8,192 needs 8,192 positions.*holds 128 "
                                          r"\(max_position_embeddings = 128\)"):
        estimate(_config(tmp_path, TINY_BERT), mode="train", batch_size=1, seq_len=8192)


@pytest.mark.slow
def test_the_position_table_bounds_are_exact(tmp_path: Path) -> None:
    """n_positions = 128: 128 tokens run; generation feeds back all but the last new token."""
    path = _config(tmp_path, TINY_GPT2)
    assert estimate(path, mode="infer", batch_size=1, seq_len=128).params_count > 0
    assert estimate(path, mode="generate", batch_size=1, seq_len=100, new_tokens=29).params_count > 0
    with pytest.raises(ConfigError, match=r"100 tokens \+ 30 new tokens needs 129 positions.*--seq-len 99 or less"):
        estimate(path, mode="generate", batch_size=1, seq_len=100, new_tokens=30)


def test_roberta_position_table_excludes_its_padding_rows(tmp_path: Path) -> None:
    """RoBERTa numbers positions after pad_token_id: 514 rows hold 512 positions (130 hold 128)."""
    config = {**TINY_BERT, "model_type": "roberta", "max_position_embeddings": 130, "pad_token_id": 1}
    source = resolve_model(_config(tmp_path, config))
    assert isinstance(source, HFConfigSource) and source.default_seq_len() == 128
    assert estimate(source, mode="infer", batch_size=1).params_count > 0
    with pytest.raises(ConfigError, match="holds 128"):
        estimate(source, mode="infer", batch_size=1, seq_len=129)


@pytest.mark.slow
def test_user_model_position_table_bounds_the_default_length(tmp_path: Path) -> None:
    """A user's nanoGPT-style model (wte, wpe of 64 rows): gpuplan's own default length (512) would
    index past the table; an explicit longer --seq-len is refused."""
    path = tmp_path / "nano.py"
    path.write_text(textwrap.dedent("""
        from torch import nn

        class Nano(nn.Module):
            def __init__(self):
                super().__init__()
                self.wte = nn.Embedding(100, 16)
                self.wpe = nn.Embedding(64, 16)
                self.head = nn.Linear(16, 100)

            def forward(self, ids):
                return self.head(self.wte(ids) + self.wpe.weight[: ids.shape[1]])

        def model():
            return Nano()
    """))
    def peak_bytes(seq_len: int | None) -> int:
        return trace_step(f"{path}:model", Workload(mode="infer", batch_size=1, seq_len=seq_len)).tensor_peak_bytes

    assert peak_bytes(None) == peak_bytes(64) > peak_bytes(63)
    with pytest.raises(ConfigError, match="'wpe' holds 64"):
        estimate(f"{path}:model", mode="infer", batch_size=1, seq_len=65)


@pytest.mark.slow
def test_rope_model_beyond_its_trained_context_runs_and_says_so(tmp_path: Path) -> None:
    """Rule: rotary positions are computed, so a longer sequence runs (as it does on a GPU); the
    estimate says the model was trained for less."""
    est = estimate(_config(tmp_path, TINY_LLAMA), mode="infer", batch_size=1, seq_len=300)
    assert any("300 positions exceed the 256 this model was trained for (max_position_embeddings)" in a
               for a in est.assumptions)
    inside = estimate(_config(tmp_path, TINY_LLAMA), mode="infer", batch_size=1, seq_len=256)
    assert not any("trained for" in a for a in inside.assumptions)


# ---------------------------------------------------------------------------------- item 13 ----

FLAN_T5_SMALL = {  # https://huggingface.co/google/flan-t5-small/blob/main/config.json (architecture fields)
    "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_model": 512, "d_ff": 1024,
    "d_kv": 64, "num_heads": 6, "num_layers": 8, "num_decoder_layers": 8, "vocab_size": 32128,
    "feed_forward_proj": "gated-gelu", "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128, "tie_word_embeddings": False, "decoder_start_token_id": 0,
    "pad_token_id": 0, "eos_token_id": 1, "layer_norm_epsilon": 1e-06,
}


@pytest.mark.slow
def test_flan_t5_small_untied_lm_head_is_counted(tmp_path: Path) -> None:
    """Published: 77M parameters (hub safetensors metadata, rounded to the million); exactly
    76,961,152 = 2 x 32128 x 512 (embedding + separate lm_head) + 8 encoder blocks x 2,360,320
    + 8 decoder blocks x 3,147,264 + 2 x (relative bias 192 + final norm 512). Old main: 60,511,616
    (lm_head tied to the embedding, as transformers 5 forces for T5Config)."""
    est = estimate(_config(tmp_path, FLAN_T5_SMALL), mode="train", batch_size=1, seq_len=16)
    assert est.params_count == 76_961_152
    assert abs(est.params_count - 77_000_000) <= 500_000


# ---------------------------------------------------------------------------------- item 21 ----

USER_CODE = textwrap.dedent("""
    import sys
    import torch
    from torch import nn
    print("printed while importing")

    class Exits(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            sys.exit(4)

    def model():
        print("printed by the factory")
        return nn.Linear(8, 8)

    def inputs(batch_size=2):
        print("printed by the inputs factory")
        return torch.randn(batch_size, 8)

    def exits():
        sys.exit(3)

    def exits_inputs(batch_size=2):
        sys.exit(0)

    def exits_forward():
        return Exits()
""")


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "user_model.py"
    path.write_text(USER_CODE)
    return path


@pytest.mark.parametrize(("spec", "error", "said"), [
    ("{file}:exits", ModelSourceError, "factory exits\\(\\) in .*user_model.py called sys.exit\\(3\\)"),
    ("{file}:model,exits_inputs", ModelSourceError, "inputs factory exits_inputs\\(\\) .* called sys.exit\\(0\\)"),
    ("{file}:exits_forward", TraceError, "forward of .*user_model.py:exits_forward called sys.exit\\(4\\)"),
])
def test_user_code_exiting_is_an_error_naming_the_file(user_file: Path, spec: str, error: type[Exception],
                                                       said: str) -> None:
    with pytest.raises(error, match=said):
        estimate(spec.format(file=user_file), mode="infer", batch_size=2)


def test_user_module_exiting_on_import_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "exits_on_import.py"
    path.write_text("import sys\nsys.exit(5)\n")
    with pytest.raises(ModelSourceError, match=r"importing .*exits_on_import.py called sys.exit\(5\)"):
        estimate(f"{path}:model", mode="infer")


def test_user_prints_stay_off_json_stdout(user_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old main: the prints landed in stdout before the JSON object."""
    code = main(["estimate", f"{user_file}:model,inputs", "--mode", "infer", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    assert json.loads(out)["params_count"] == 8 * 8 + 8
    assert "printed while importing" in err and "printed by the factory" in err and "printed by the inputs" in err


def test_user_exit_does_not_become_gpuplans_exit_code(user_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Old main: `sys.exit(3)` in the factory made gpuplan exit 3 with nothing said."""
    code = main(["estimate", f"{user_file}:exits", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.splitlines()[0] == "printed while importing"  # the user's own print, on stderr
    assert err.splitlines()[1:] == [line for line in err.splitlines() if "called sys.exit(3)" in line]


# ---------------------------------------------------------------------------------- item 22 ----

def test_failing_forward_under_fake_tensors_prints_no_traceback(tmp_path: Path,
                                                                capfd: pytest.CaptureFixture[str]) -> None:
    """Old main: torch's fake_tensor logger wrote a ~20-line traceback to stderr first."""
    path = tmp_path / "mismatch.py"
    path.write_text("from torch import nn\n\ndef model():\n"
                    "    return nn.Sequential(nn.Linear(8, 8), nn.Linear(4, 8))\n")
    code = main(["estimate", f"{path}:model"])
    out, err = capfd.readouterr()
    assert code == 2 and out == ""
    assert "Traceback" not in err and err.count("\n") == 1
    assert "same reduction dim" in err


# ------------------------------------------------------------------------------ gpuplan models ----

def test_models_verb_lists_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    catalog = catalog_models()
    assert listed["count"] == len(catalog) == len(listed["models"])
    by_name = {m["name"]: m for m in listed["models"]}
    assert by_name["gpt2"]["published_params"] == 124_439_808 and by_name["gpt2"]["family"] == "gpt2"
    assert main(["models", "--task", "seq2seq-lm"]) == 0
    text = capsys.readouterr().out
    assert "t5-base" in text and "gpt2 " not in text
    assert main(["models", "--family", "no-such-family", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["count"] == 0


@pytest.mark.slow
def test_seq2seq_inference_feeds_the_decoder() -> None:
    """Old main: `--mode infer` on any T5/BART config failed ("You must specify exactly one of
    input_ids or inputs_embeds"), while `--mode generate` told the user to use --mode infer. The
    fake trace equals a real CPU run of the same step, byte for byte."""
    source = HFConfigSource("tiny-t5", {**TINY_T5, "architectures": ["T5ForConditionalGeneration"]})
    work = Workload(mode="infer", batch_size=2, seq_len=16)
    fake = trace_step(source, work, cuda=False)
    real = trace_step(source, work, cuda=False, fake=False)
    assert fake.tensor_peak_bytes == real.tensor_peak_bytes > fake.param_bytes
