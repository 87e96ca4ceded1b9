"""Where a Modelfile's paths lead: a GGUF saved as model.bin in a FROM directory is found by its magic, a
directory with no model says so, `~user/` is that user's home, and DRAFT may not be FROM's own file."""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

import pytest

from ollama_py.api.names import parse_name
from ollama_py.cli.create import expand_path, plan_create
from ollama_py.errors import BadRequest, OllamaError
from ollama_py.modelfile import parse_modelfile
from ollama_py.store.create import create_model
from ollama_py.store.models import ModelStore
from tests.fakes.gguf_files import write_llama_gguf


def test_server_side_from_directory_finds_a_gguf_named_model_bin(tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    shutil.move(write_llama_gguf(tmp_path / "m.gguf"), weights / "model.bin")
    (weights / "notes.bin").write_bytes(b"not weights")
    store = ModelStore(tmp_path / "models")
    events = list(create_model(store, parse_name("frombin"), {"from": str(weights)},
                               import_dirs=[tmp_path]))
    assert events[-1] == {"status": "success"}
    assert store.load(parse_name("frombin")).info.architecture == "llama"


def test_server_side_from_a_directory_without_a_model(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("nothing here")
    store = ModelStore(tmp_path / "models")
    with pytest.raises(BadRequest, match=r"^no model found in empty: the directory holds no GGUF file"):
        list(create_model(store, parse_name("x"), {"from": str(empty)}, import_dirs=[tmp_path]))


def test_cli_from_directory_finds_model_bin(tmp_path: Path) -> None:
    shutil.move(write_llama_gguf(tmp_path / "m.gguf"), tmp_path / "model.bin")
    plan = plan_create(parse_modelfile("FROM ."), tmp_path, tmp_path)
    assert [f.name for f in plan.files] == ["model.bin"]


def test_tilde_user_is_that_users_home(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.getuid())
    assert expand_path(f"~{me.pw_name}/models/m.gguf", tmp_path, tmp_path) == Path(me.pw_dir) / "models/m.gguf"
    assert expand_path(f"~{me.pw_name}", tmp_path, tmp_path) == Path(me.pw_dir)


def test_tilde_unknown_user_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(OllamaError, match="^failed to find user 'no-such-user-xyz': user: unknown user "
                                          "no-such-user-xyz$"):
        plan_create(parse_modelfile("FROM ~no-such-user-xyz/m.gguf"), tmp_path, tmp_path)


@pytest.mark.parametrize("draft", ["./m.gguf", "m.gguf", "{dir}/m.gguf"], ids=["dot", "bare", "absolute"])
def test_draft_same_as_from_is_refused(tmp_path: Path, draft: str) -> None:
    write_llama_gguf(tmp_path / "m.gguf")
    mf = parse_modelfile(f"FROM ./m.gguf\nDRAFT {draft.format(dir=tmp_path)}")
    with pytest.raises(OllamaError, match="^DRAFT must not reference the same local path as FROM$"):
        plan_create(mf, tmp_path, tmp_path)


def test_draft_of_another_file_is_kept(tmp_path: Path) -> None:
    write_llama_gguf(tmp_path / "m.gguf")
    write_llama_gguf(tmp_path / "d.gguf", seed=1)
    plan = plan_create(parse_modelfile("FROM ./m.gguf\nDRAFT ./d.gguf"), tmp_path, tmp_path)
    assert [f.name for f in plan.draft_files] == ["d.gguf"]


@pytest.mark.parametrize("name", ["numa", "num_gqa", "penalize_newline"])
def test_deprecated_parameters_parse_warn_and_are_dropped(tmp_path: Path, name: str) -> None:
    mf = parse_modelfile(f"FROM ./m.gguf\nPARAMETER {name} 1\nPARAMETER top_k 3")
    assert mf.warnings == [f"parameter {name} is deprecated"]
    write_llama_gguf(tmp_path / "m.gguf")
    plan = plan_create(mf, tmp_path, tmp_path)
    assert plan.fields["parameters"] == {"top_k": 3}
