"""Model names: Ollama's grammar, defaults, display forms, and nothing that can leave the store."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ollama_py.api.names import ModelName, is_valid_digest, parse_name, parse_ref, stored_ref
from ollama_py.errors import BadRequest, InvalidModelName
from ollama_py.store.manifests import ManifestStore

HEX = "a" * 64

VALID = [
    ("llama3.2", ("registry.ollama.ai", "library", "llama3.2", "latest"), "llama3.2:latest"),
    ("llama3.2:1b", ("registry.ollama.ai", "library", "llama3.2", "1b"), "llama3.2:1b"),
    ("smollm2:135m-instruct-q4_K_M", ("registry.ollama.ai", "library", "smollm2", "135m-instruct-q4_K_M"),
     "smollm2:135m-instruct-q4_K_M"),
    ("user/model", ("registry.ollama.ai", "user", "model", "latest"), "user/model:latest"),
    ("user/model:v1.0", ("registry.ollama.ai", "user", "model", "v1.0"), "user/model:v1.0"),
    ("example.com/ns/model:tag", ("example.com", "ns", "model", "tag"), "example.com/ns/model:tag"),
    ("localhost:5000/ns/model", ("localhost:5000", "ns", "model", "latest"), "localhost:5000/ns/model:latest"),
    ("localhost:5000/ns/model:v2", ("localhost:5000", "ns", "model", "v2"), "localhost:5000/ns/model:v2"),
    ("hf.co/bartowski/SmolLM2-135M-GGUF:Q4_K_M", ("hf.co", "bartowski", "SmolLM2-135M-GGUF", "Q4_K_M"),
     "hf.co/bartowski/SmolLM2-135M-GGUF:Q4_K_M"),
    ("https://example.com/ns/model", ("example.com", "ns", "model", "latest"), "example.com/ns/model:latest"),
    ("http://localhost:5000/ns/m:t", ("localhost:5000", "ns", "m", "t"), "localhost:5000/ns/m:t"),
    ("Mixed_Case/Model-1:Tag_2", ("registry.ollama.ai", "Mixed_Case", "Model-1", "Tag_2"),
     "Mixed_Case/Model-1:Tag_2"),
    ("_private", ("registry.ollama.ai", "library", "_private", "latest"), "_private:latest"),
    (f"model@sha256:{HEX}", ("registry.ollama.ai", "library", "model", "latest"), "model:latest"),
    (f"model:tag@sha256-{HEX}", ("registry.ollama.ai", "library", "model", "tag"), "model:tag"),
    ("  padded  ", ("registry.ollama.ai", "library", "padded", "latest"), "padded:latest"),
    ("registry.ollama.ai/library/x:latest", ("registry.ollama.ai", "library", "x", "latest"), "x:latest"),
    ("m" * 80 + ":" + "t" * 80, ("registry.ollama.ai", "library", "m" * 80, "t" * 80), "m" * 80 + ":" + "t" * 80),
]


@pytest.mark.parametrize(("raw", "parts", "short"), VALID, ids=[v[0][:40] for v in VALID])
def test_parse_valid(raw: str, parts: tuple[str, str, str, str], short: str) -> None:
    name = parse_name(raw)
    assert name.parts == parts
    assert name.short == short


INVALID = {
    "empty": "",
    "blank": "   ",
    "parent dir": "..",
    "parent as model": "ns/..",
    "parent as namespace": "../model",
    "dot": ".",
    "absolute path": "/etc/passwd",
    "absolute with host": "/host/ns/model",
    "four parts": "a/b/c/d",
    "backslash": "ns\\model",
    "windows path": "C:\\models\\x",
    "empty tag": "model:",
    "empty model": "ns/:tag",
    "empty namespace": "/model",
    "trailing slash": "model/",
    "double slash": "ns//model",
    "space inside": "my model",
    "tab inside": "my\tmodel",
    "newline inside": "mo\ndel",
    "nul": "mo\0del",
    "dot in namespace": "my.ns/model",
    "leading dot model": ".hidden",
    "leading dash": "-model",
    "leading dash tag": "model:-x",
    "colon in tag": "model:a:b",
    "unicode": "modèle",
    "fullwidth slash": "ns／model",
    "emoji": "😀",
    "model too long": "m" * 81,
    "tag too long": "m:" + "t" * 81,
    "namespace too long": "n" * 81 + "/m",
    "host too long": "h" * 351 + "/n/m",
    "bad scheme": "ftp://host/ns/model",
    "bad digest": "model@sha256:xyz",
    "digest only": f"@sha256:{HEX}",
    "percent": "mod%2fel",
    "slash in tag": "model:a/b",
}


@pytest.mark.parametrize("raw", list(INVALID.values()), ids=list(INVALID))
def test_parse_invalid(raw: str) -> None:
    with pytest.raises(InvalidModelName) as exc:
        parse_name(raw)
    assert str(exc.value) == "invalid model name"
    assert exc.value.status == 400


@pytest.mark.parametrize("value", [None, 3, b"model", ["model"]], ids=["none", "int", "bytes", "list"])
def test_parse_non_string(value: object) -> None:
    with pytest.raises(InvalidModelName):
        parse_name(value)  # type: ignore[arg-type]


def test_short_keeps_non_default_host_and_namespace() -> None:
    assert parse_name("example.com/library/m").short == "example.com/library/m:latest"
    assert parse_name("library/m").short == "m:latest"
    assert parse_name("REGISTRY.OLLAMA.AI/LIBRARY/m").short == "m:latest"


def test_key_ignores_case_but_value_keeps_it() -> None:
    a, b = parse_name("Llama3:Latest"), parse_name("llama3:latest")
    assert a != b
    assert a.key() == b.key()
    assert a.model == "Llama3"


@pytest.mark.parametrize(("digest", "ok"), [
    (f"sha256:{HEX}", True),
    (f"sha256-{HEX}", True),
    (f"sha256:{HEX.upper()}", True),
    (f"sha256:{HEX[:-1]}", False),
    (f"sha256:{HEX}0", False),
    (f"sha512:{HEX}", False),
    ("sha256:" + "g" * 64, False),
    ("", False),
], ids=["colon", "dash", "upper", "short", "long", "sha512", "non-hex", "empty"])
def test_is_valid_digest(digest: str, ok: bool) -> None:
    assert is_valid_digest(digest) is ok


# -- properties -----------------------------------------------------------------------------------------

_FIRST = string.ascii_letters + string.digits + "_"
_PART_REST = _FIRST + "-"


def _part(extra: str, max_len: int) -> st.SearchStrategy[str]:
    return st.builds(lambda a, b: a + b, st.sampled_from(_FIRST),
                     st.text(alphabet=_PART_REST + extra, max_size=max_len - 1))


hosts = _part(".:", 40)
namespaces = _part("", 30)
models = _part(".", 30)
tags = _part(".", 30)


@given(st.text(max_size=120))
def test_parse_raises_only_invalid_model_name(raw: str) -> None:
    try:
        name = parse_name(raw)
    except InvalidModelName:
        return
    assert all(name.parts)


@given(st.text(alphabet=string.ascii_letters + string.digits + "_-.:/@\\ %~", max_size=60))
def test_parse_raises_only_invalid_model_name_on_name_like_text(raw: str) -> None:
    try:
        parse_name(raw)
    except InvalidModelName:
        pass


@given(hosts, namespaces, models, tags)
def test_valid_names_round_trip_through_str(host: str, namespace: str, model: str, tag: str) -> None:
    name = parse_name(f"{host}/{namespace}/{model}:{tag}")
    assert name.parts == (host, namespace, model, tag)
    again = parse_name(str(name))
    assert again == name
    assert parse_name(name.short).parts == name.parts


@given(st.text(max_size=80))
def test_parsed_names_never_leave_the_store(raw: str) -> None:
    try:
        name = parse_name(raw)
    except InvalidModelName:
        return
    root = Path("/nonexistent-store-root")
    for part in name.parts:
        assert part not in ("", ".", "..")
        assert "/" not in part and "\\" not in part and "\0" not in part
    path = ManifestStore(root).path(name)
    assert path.resolve().is_relative_to((root / "manifests").resolve())
    assert len(path.relative_to(root / "manifests").parts) == 4


@given(st.lists(st.sampled_from(["..", ".", "", "a", "/", "\\", "~", "x:y"]), min_size=1, max_size=6))
def test_path_escaping_inputs_are_rejected(pieces: list[str]) -> None:
    raw = "/".join(pieces)
    try:
        name = parse_name(raw)
    except InvalidModelName:
        return
    assert ".." not in name.parts and "." not in name.parts


def test_manifest_path_refuses_hand_built_escaping_name(tmp_path: Path) -> None:
    store = ManifestStore(tmp_path)
    for bad in (ModelName("..", "ns", "m", "t"), ModelName("h", "..", "m", "t"),
                ModelName("h", "ns", "a/../../x", "t"), ModelName("h", "ns", "m", "")):
        with pytest.raises(InvalidModelName):
            store.path(bad)


def test_a_name_is_parsed_once_and_a_bad_one_refused_every_time() -> None:
    """Every request names its model: the same text gives the same (immutable) name; a bad one is never
    remembered as good, and the memo stays bounded whatever names clients send."""
    from ollama_py.api import names

    assert parse_name("Qwen3:8b") is parse_name("Qwen3:8b")
    assert parse_name(" Qwen3:8b ") == ModelName("registry.ollama.ai", "library", "Qwen3", "8b")
    for _ in range(2):
        with pytest.raises(InvalidModelName):
            parse_name("../etc:passwd")
    for k in range(names._PARSED.limit + 5):
        parse_name(f"m{k}")
    assert len(names._PARSED) <= names._PARSED.limit
    assert parse_name("m0").model == "m0"


@pytest.mark.parametrize(("raw", "base", "source", "stored"), [
    ("gpt-oss:20b:cloud", "gpt-oss:20b", "cloud", "gpt-oss:20b-cloud"),
    ("gpt-oss:cloud", "gpt-oss", "cloud", "gpt-oss:cloud"),
    ("gpt-oss:20b-cloud", "gpt-oss:20b", "cloud", "gpt-oss:20b-cloud"),
    ("ns/model:Cloud", "ns/model", "cloud", "ns/model:cloud"),
    (" gemma3:local ", "gemma3", "local", "gemma3"),
    ("gemma3:4b:local", "gemma3:4b", "local", "gemma3:4b"),
    ("gemma3:4b", "gemma3:4b", "", "gemma3:4b"),
    ("localhost:5000/ns/model", "localhost:5000/ns/model", "", "localhost:5000/ns/model"),  # a port, no suffix
    ("localhost:5000/ns/model:cloud", "localhost:5000/ns/model", "cloud", "localhost:5000/ns/model:cloud"),
    ("cloud", "cloud", "", "cloud"),  # a model named "cloud"
])
def test_a_references_source_suffix(raw, base, source, stored):
    """Ollama's internal/modelref: the suffix says where the model comes from; a pull stores a cloud model's
    stub under the older `-cloud` tag."""
    ref = parse_ref(raw)
    assert (ref.base, ref.source) == (base, source)
    assert stored_ref(raw) == stored


@pytest.mark.parametrize("raw", ["m:cloud:local", "m:local:cloud", "m:8b-cloud:cloud", "m:local:local"])
def test_two_source_suffixes_are_refused(raw):
    with pytest.raises(BadRequest, match=f'^use either :local or :cloud, not both: "{raw}"$'):
        parse_ref(raw)
