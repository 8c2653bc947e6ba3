"""Hub ids ORG/NAME[@REVISION] (issue 11): resolved through a local Hugging Face cache laid out as
huggingface_hub writes it (tests/fixtures/model_files.hub_repo), offline first; the network fetch is
tested with huggingface_hub's download functions replaced. No test here touches the network: the root
conftest sets HF_HUB_OFFLINE=1, and the two fetch tests that unset it replace the downloader first."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import save_file

from gpuplan.cli.main import main
from gpuplan.errors import ModelSourceError, UnknownModelError
from gpuplan.models.files import CONFIG_MAX_BYTES
from gpuplan.models.hub import hub_cache_dir, hub_id_from_url, is_hub_id
from gpuplan.models.sources import FactorySource, HFConfigSource, resolve_model
from tests.fixtures.model_files import COMMIT_A, COMMIT_B, hub_repo
from tests.fixtures.tiny_models import TINY_GPT2, TINY_LLAMA

ONE_LINE_CHARS = 400


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "hub"
    folder.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(folder))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return folder


def _one_line(exc: BaseException | pytest.ExceptionInfo[Any]) -> str:
    text = str(exc.value if isinstance(exc, pytest.ExceptionInfo) else exc)
    assert "\n" not in text and len(text) <= ONE_LINE_CHARS, text
    return text


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_the_cache_location_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hub_cache_dir() == tmp_path / "elsewhere"


def test_a_cached_hub_id_is_its_config(cache: Path) -> None:
    hub_repo(cache, "acme/tiny-llama", {"config.json": TINY_LLAMA})
    source = resolve_model("acme/tiny-llama")
    assert isinstance(source, HFConfigSource) and source.name == "acme/tiny-llama"
    assert source.config_dict == TINY_LLAMA and source.task == "causal-lm"
    assert source.stored_weights() is None  # the snapshot holds no weights


def test_revisions_branch_tag_and_commit(cache: Path) -> None:
    hub_repo(cache, "acme/tiny", {"config.json": TINY_LLAMA}, commit=COMMIT_A, refs=("main",))
    wider = {**TINY_LLAMA, "hidden_size": 128}
    hub_repo(cache, "acme/tiny", {"config.json": wider}, commit=COMMIT_B, refs=("v2",))
    for spec, hidden in (("acme/tiny", 64), ("acme/tiny@main", 64), ("acme/tiny@v2", 128),
                         (f"acme/tiny@{COMMIT_B}", 128), (f"acme/tiny@{COMMIT_A}", 64)):
        source = resolve_model(spec)
        assert isinstance(source, HFConfigSource) and source.config_dict["hidden_size"] == hidden, spec
    with pytest.raises(ModelSourceError) as info:
        resolve_model("acme/tiny@v3")
    assert "hf download acme/tiny config.json --revision v3" in _one_line(info)


@pytest.mark.parametrize(("url", "hub_id"), [
    ("https://huggingface.co/acme/tiny", "acme/tiny"),
    ("https://huggingface.co/acme/tiny/tree/v2", "acme/tiny@v2"),
    ("https://huggingface.co/acme/tiny/blob/main/config.json", "acme/tiny@main"),
    ("http://www.huggingface.co/acme/tiny?library=transformers", "acme/tiny"),
    ("huggingface.co/acme/tiny", "acme/tiny"), ("hf.co/acme/tiny/", "acme/tiny"),
    ("hf://acme/tiny@v2", "acme/tiny@v2"), ("hf://acme/tiny", "acme/tiny"),
    ("acme/tiny", None), ("https://example.com/acme/tiny", None), ("timm:resnet18", None)])
def test_a_pasted_hub_url_is_its_id(url: str, hub_id: str | None) -> None:
    """People paste the model page's address: it names the same repo (and revision) as ORG/NAME[@REV]."""
    assert hub_id_from_url(url) == hub_id


def test_a_pasted_url_resolves_like_its_id_and_datasets_are_refused(cache: Path) -> None:
    hub_repo(cache, "acme/tiny", {"config.json": TINY_LLAMA}, commit=COMMIT_A, refs=("main",))
    wider = {**TINY_LLAMA, "hidden_size": 128}
    hub_repo(cache, "acme/tiny", {"config.json": wider}, commit=COMMIT_B, refs=("v2",))
    for url, hidden in (("https://huggingface.co/acme/tiny", 64), ("https://huggingface.co/acme/tiny/tree/v2", 128),
                        ("hf://acme/tiny@v2", 128)):
        source = resolve_model(url)
        assert isinstance(source, HFConfigSource) and source.config_dict["hidden_size"] == hidden, url
    for url, words in (("https://huggingface.co/datasets/acme/tiny", "dataset, not a model"),
                       ("https://hf.co/spaces/acme/demo", "space, not a model"),
                       ("https://huggingface.co/acme/../x", "does not name a Hub model")):
        with pytest.raises(ModelSourceError, match=words) as info:
            resolve_model(url)
        assert "\n" not in str(info.value)
    code, out, err = _cli("estimate", "https://huggingface.co/datasets/acme/tiny", "--json")
    assert code == 2 and out == "" and err.count("\n") == 1 and "dataset, not a model" in err


def test_not_cached_offline_says_what_to_download(cache: Path) -> None:
    with pytest.raises(ModelSourceError) as info:
        resolve_model("acme/never-downloaded")
    text = _one_line(info)
    assert "hf download acme/never-downloaded config.json" in text
    assert "HF_HUB_OFFLINE" in text and "config.json path" in text and str(cache) in text and "no such path" in text
    with pytest.raises(ModelSourceError, match=r"built in: mistralai/Mixtral-8x7B-v0\.1"):
        resolve_model("mistralai/Mixtral-8x22B-v0.1")
    code, out, err = _cli("estimate", "acme/never-downloaded", "--json")
    assert code == 2 and out == "" and err.count("\n") == 1 and "hf download" in err


def test_a_catalog_model_needs_no_cache(cache: Path) -> None:
    # the built-in entry published under that id answers offline; a cached copy would win
    source = resolve_model("openai-community/gpt2")
    assert isinstance(source, HFConfigSource) and source.kind == "catalog" and source.name == "gpt2"
    hub_repo(cache, "openai-community/gpt2", {"config.json": TINY_GPT2})
    cached = resolve_model("openai-community/gpt2")
    assert isinstance(cached, HFConfigSource) and cached.config_dict == TINY_GPT2


def test_cached_safetensors_headers_are_the_stored_weights(cache: Path, tmp_path: Path) -> None:
    weights = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(64, 32, dtype=torch.bfloat16), "b": torch.zeros(32)}, str(weights))
    hub_repo(cache, "acme/with-weights", {"config.json": TINY_LLAMA, "model.safetensors": weights.read_bytes()})
    stored = resolve_model("acme/with-weights").stored_weights()
    assert stored is not None and stored.params_count == 64 * 32 + 32
    assert stored.dtype_bytes == {"BF16": 64 * 32 * 2, "F32": 32 * 4}
    # an index naming a shard the cache does not hold (a partial download) would undercount: none
    index = {"metadata": {"total_size": 1}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                            "b": "model-00002-of-00002.safetensors"}}
    hub_repo(cache, "acme/partial", {"config.json": TINY_LLAMA, "model.safetensors.index.json": index,
                                     "model-00001-of-00002.safetensors": weights.read_bytes()})
    assert resolve_model("acme/partial").stored_weights() is None


def test_a_quantized_checkpoint_on_the_hub_exposes_its_quantization(cache: Path) -> None:
    config = {**TINY_LLAMA, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128,
                                                    "zero_point": True, "version": "gemm"}}
    hub_repo(cache, "acme/tiny-awq", {"config.json": config})
    quant = resolve_model("acme/tiny-awq").quantization()
    assert quant is not None and (quant.method, quant.bits, quant.group_size) == ("awq", 4, 128)


# ------------------------------------------------------------------------------ precedence ----

def test_an_existing_path_wins_over_a_hub_id(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub_repo(cache, "acme/tiny", {"config.json": TINY_LLAMA})
    (tmp_path / "acme" / "tiny").mkdir(parents=True)
    (tmp_path / "acme" / "tiny" / "config.json").write_text(json.dumps(TINY_GPT2))
    monkeypatch.chdir(tmp_path)
    source = resolve_model("acme/tiny")
    assert isinstance(source, HFConfigSource) and source.config_dict["model_type"] == "gpt2"


def test_factories_are_not_hub_ids(cache: Path) -> None:
    # (timm:NAME is checked before the factory form: tests/models/test_timm.py)
    assert isinstance(resolve_model("tests.fixtures.tiny_models:mlp"), FactorySource)
    assert not is_hub_id("pkg/mod:factory") and not is_hub_id("./acme/tiny") and not is_hub_id("/abs/path")


@pytest.mark.parametrize("spec", ["a--b/c", "acme/b.git", "x/" + "y" * 120])
def test_ids_the_hub_refuses_are_one_line(cache: Path, spec: str) -> None:
    with pytest.raises(UnknownModelError, match="not a valid Hugging Face Hub id") as info:
        resolve_model(spec)
    _one_line(info)


def test_a_revision_cannot_climb_out_of_the_cache(cache: Path) -> None:
    assert not is_hub_id("acme/tiny@x/../../../etc")


_NAME = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_-]{0,20}[A-Za-z0-9])?", fullmatch=True)


@given(_NAME, _NAME, st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,30}", fullmatch=True)))
def test_hub_ids_are_recognised_and_paths_factories_are_not(org: str, name: str, revision: str | None) -> None:
    spec = f"{org}/{name}" + (f"@{revision}" if revision else "")
    assert is_hub_id(spec)
    for other in (f"/{spec}", f"./{spec}", f"{spec}:factory", f"{org}/{name}/extra", f"~/{org}"):
        assert not is_hub_id(other), other


# --------------------------------------------------------------------------------- fetching ----

class _Metadata:
    def __init__(self, size: int) -> None:
        self.size = size


def test_online_fetches_config_json_alone_into_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls: list[tuple[str, str, str | None]] = []

    def download(repo: str, filename: str, *, revision: str | None = None, cache_dir: str, **_: Any) -> str:
        calls.append((repo, filename, revision))
        snapshot = hub_repo(Path(cache_dir), repo, {filename: TINY_LLAMA}, refs=(revision or "main",))
        return str(snapshot / filename)

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda url, **_: _Metadata(300))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    source = resolve_model("acme/fresh@v1")
    assert isinstance(source, HFConfigSource) and source.config_dict == TINY_LLAMA
    assert calls == [("acme/fresh", "config.json", "v1")]
    resolve_model("acme/fresh@v1")  # now cached: no second download
    assert len(calls) == 1


def _hub_error(cls: type[Exception]) -> Exception:
    import httpx2  # huggingface_hub's HTTP client; its errors carry the response

    response = httpx2.Response(401, request=httpx2.Request("GET", "https://huggingface.co/acme/x"))
    return cls("refused", response=response)  # type: ignore[call-arg]


@pytest.mark.parametrize(("raised", "error", "words"), [
    ("GatedRepoError", ModelSourceError, ("gated", "HF_TOKEN", "hf auth login")),
    ("RepositoryNotFoundError", UnknownModelError, ("no Hugging Face repo", "HF_TOKEN")),
    ("RevisionNotFoundError", ModelSourceError, ("no revision",)),
    ("RemoteEntryNotFoundError", ModelSourceError, ("has no config.json", ".gguf")),
    ("OSError", ModelSourceError, ("cannot be reached", "hf download acme/x config.json")),
])
def test_each_way_the_hub_refuses_is_one_line(cache: Path, monkeypatch: pytest.MonkeyPatch, raised: str,
                                              error: type[Exception], words: tuple[str, ...]) -> None:
    from huggingface_hub import errors

    monkeypatch.delenv("HF_HUB_OFFLINE")
    exc = OSError("network is unreachable") if raised == "OSError" else _hub_error(getattr(errors, raised))

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise exc

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", refuse)
    with pytest.raises(error) as info:
        resolve_model("acme/x@dev" if raised == "RevisionNotFoundError" else "acme/x")
    text = _one_line(info)
    assert all(w in text for w in words), text


def test_an_oversized_config_is_not_downloaded(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda url, **_: _Metadata(CONFIG_MAX_BYTES + 1))

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("downloaded a config.json larger than the bound")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", never)
    with pytest.raises(ModelSourceError) as info:
        resolve_model("acme/huge")
    assert f"{CONFIG_MAX_BYTES:,}" in _one_line(info)
