"""`run` (one-shot and the REPL's commands) against the fake server. The REPL is driven by a scripted reader; the
real terminal (readline, Ctrl-C, spinner) is covered by tests/integration/test_repl.py."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ollama_py.cli.display import WordWrapper
from ollama_py.cli.main import cli
from ollama_py.cli.repl import Repl
from ollama_py.cli.session import RunOptions
from ollama_py.client import Client
from tests.helpers.fake_ollama import FakeOllama

SHOW = {"details": {"family": "llama"}, "capabilities": ["completion"], "modelfile": "FROM /blobs/x\n",
        "parameters": 'stop                           "<|im_end|>"', "template": "{{ .Prompt }}",
        "system": "You are SmolLM."}
FINAL = {"done": True, "done_reason": "stop", "total_duration": 1_500_000_000, "load_duration": 1_000_000,
         "prompt_eval_count": 10, "prompt_eval_duration": 50_000_000, "eval_count": 4, "eval_duration": 200_000_000}


def answer(*words: str, key: str = "response") -> list[dict[str, Any]]:
    if key == "response":
        return [{"response": w, "done": False} for w in words] + [FINAL]
    return [{"message": {"role": "assistant", "content": w}, "done": False} for w in words] + [
        {"message": {"role": "assistant", "content": ""}, **FINAL}]


def invoke(fake: FakeOllama, args: list[str], tmp_path: Path, stdin: str = "") -> Result:
    env = {"OLLAMA_HOST": fake.host, "OLLAMA_PY_DATA_DIR": str(tmp_path / "data")}
    return CliRunner().invoke(cli, args, env=env, input=stdin, catch_exceptions=False)


@pytest.fixture
def model(fake: FakeOllama) -> FakeOllama:
    fake.on("POST", "/api/show", SHOW)
    return fake


def test_run_with_a_prompt_answers_once(model: FakeOllama, tmp_path: Path) -> None:
    model.on("POST", "/api/generate", answer("The sky", " is blue."))
    result = invoke(model, ["run", "smollm2:135m", "Why", "is", "the", "sky", "blue?"], tmp_path)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "The sky is blue.\n\n", "")
    assert model.bodies("POST", "/api/generate") == [{"model": "smollm2:135m", "prompt": "Why is the sky blue?",
                                                      "stream": True}]


def test_piped_stdin_is_prepended_to_the_prompt(model: FakeOllama, tmp_path: Path) -> None:
    model.on("POST", "/api/generate", answer("ok"))
    invoke(model, ["run", "m", "Summarize:"], tmp_path, stdin="some text\n")
    assert model.bodies("POST", "/api/generate")[0]["prompt"] == "some text\n Summarize:"


def test_run_flags_reach_the_request(model: FakeOllama, tmp_path: Path) -> None:
    model.on("POST", "/api/generate", answer("{}"))
    invoke(model, ["run", "m", "--format", "json", "--keepalive", "10m", "--think=low", "hi"], tmp_path)
    body = model.bodies("POST", "/api/generate")[0]
    assert (body["format"], body["keep_alive"], body["think"], body["prompt"]) == ("json", "10m", "low", "hi")


def test_bare_think_means_true_and_the_next_word_is_prompt(model: FakeOllama, tmp_path: Path) -> None:
    model.on("POST", "/api/generate", answer("ok"))
    invoke(model, ["run", "m", "--think", "high"], tmp_path)
    body = model.bodies("POST", "/api/generate")[0]
    assert (body["think"], body["prompt"]) == (True, "high")


@pytest.mark.parametrize(
    ("args", "error"),
    [(["--think=maybe", "hi"], 'Error: invalid value for --think: "maybe" (must be true, false, high, medium, low, '
                               "or max)\n"),
     (["--keepalive", "soon", "hi"], 'Error: time: invalid duration "soon"\n')],
    ids=["think", "keepalive"],
)
def test_bad_run_flags(model: FakeOllama, tmp_path: Path, args: list[str], error: str) -> None:
    result = invoke(model, ["run", "m", *args], tmp_path)
    assert (result.exit_code, result.stderr) == (1, error)


def test_verbose_prints_ollama_timings_on_stderr(model: FakeOllama, tmp_path: Path) -> None:
    model.on("POST", "/api/generate", answer("ok"))
    result = invoke(model, ["run", "m", "--verbose", "hi"], tmp_path)
    assert result.stdout == "ok\n\n"
    assert result.stderr.splitlines() == [
        "total duration:       1.5s", "load duration:        1ms", "prompt eval count:    10 token(s)",
        "prompt eval duration: 50ms", "prompt eval rate:     200.00 tokens/s", "eval count:           4 token(s)",
        "eval duration:        200ms", "eval rate:            20.00 tokens/s"]


def test_thinking_is_shown_in_plain_text_when_piped(model: FakeOllama, tmp_path: Path) -> None:
    model.on("POST", "/api/generate", [{"thinking": "Hmm.", "done": False}, {"response": "Yes.", "done": False},
                                       FINAL])
    assert invoke(model, ["run", "m", "q"], tmp_path).stdout == "Thinking...\nHmm.\n...done thinking.\n\nYes.\n\n"
    assert invoke(model, ["run", "m", "--hidethinking", "q"], tmp_path).stdout == "Yes.\n\n"


def test_run_pulls_a_missing_model_first(fake: FakeOllama, tmp_path: Path) -> None:
    shows = iter([(404, {"error": "model 'm' not found"}), SHOW])
    fake.on("POST", "/api/show", lambda body: next(shows))
    fake.on("POST", "/api/pull", [{"status": "pulling manifest"}, {"status": "success"}])
    fake.on("POST", "/api/generate", answer("hi"))
    result = invoke(fake, ["run", "m", "hello"], tmp_path)
    assert result.exit_code == 0
    assert [line.strip() for line in result.stderr.splitlines()] == ["pulling manifest", "success"]
    assert result.stdout == "hi\n\n"


def test_run_an_embedding_model_prints_the_vector(fake: FakeOllama, tmp_path: Path) -> None:
    fake.on("POST", "/api/show", {"capabilities": ["embedding"]})
    fake.on("POST", "/api/embed", {"embeddings": [[0.6, 0.8]]})
    assert invoke(fake, ["run", "e", "text"], tmp_path).stdout == "[0.6,0.8]\n"
    assert invoke(fake, ["run", "e"], tmp_path).stderr == (
        'Error: embedding models require input text. Usage: ollama-py run e "your text here"\n')


@pytest.mark.parametrize(("flags", "sent"), [
    ([], {}), (["--truncate"], {"truncate": True}), (["--truncate=false"], {"truncate": False}),
    (["--dimensions", "2"], {"dimensions": 2}),
    (["--truncate=true", "--dimensions=8"], {"truncate": True, "dimensions": 8}),
])
def test_run_an_embedding_model_with_truncate_and_dimensions(fake: FakeOllama, tmp_path: Path, flags: list[str],
                                                             sent: dict[str, Any]) -> None:
    """As Ollama's `run --truncate[=false] --dimensions N`: sent with /api/embed only when given; a bare --truncate
    leaves the next word in the text."""
    fake.on("POST", "/api/show", {"capabilities": ["embedding"]})
    fake.on("POST", "/api/embed", {"embeddings": [[0.6, 0.8]]})
    assert invoke(fake, ["run", "e", *flags, "some", "text"], tmp_path).stdout == "[0.6,0.8]\n"
    assert fake.bodies("POST", "/api/embed") == [{"model": "e", "input": "some text", **sent}]


@pytest.mark.parametrize(
    ("chunks", "shown"),
    [(["the quick brownish fox"], "the quick brown\x1b[5D\x1b[K\nbrownish fox"),
     (["the quick bro", "wnish fox"], "the quick brown\x1b[5D\x1b[K\nbrownish fox"),
     (["the quick brown fox"], "the quick brown\nfox"),
     (["a\nthe quick brown fox"], "a\nthe quick brown\nfox"),
     (["abcdefghijklmnopqrstuvwxyz"], "abcdefghijklmno\npqrstuvwxyz")],
    ids=["word-moves", "word-split-across-chunks", "blank-at-margin-breaks", "newline-resets", "long-word-breaks"],
)
def test_word_wrapper_at_width_20(chunks: list[str], shown: str) -> None:
    # 15 columns fit (width - 5); the word being typed when the margin is reached moves to the next line
    out = io.StringIO()
    wrapper = WordWrapper(out, width=20)
    for chunk in chunks:
        wrapper.write(chunk)
    assert out.getvalue() == shown


# -- the REPL with a scripted reader --------------------------------------------------------------------------------


class Script:
    """A LineReader that types the given lines; an Exception instance is raised instead of returned."""

    def __init__(self, *lines: str | BaseException) -> None:
        self.lines = list(lines)
        self.history: list[bool] = []
        self.prompts: list[str] = []

    def read(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.lines:
            raise EOFError
        line = self.lines.pop(0)
        if isinstance(line, BaseException):
            raise line
        return line

    def pending(self) -> str:
        return ""

    def set_history(self, enabled: bool) -> None:
        self.history.append(enabled)


def repl(fake: FakeOllama, *lines: str | BaseException, **opts: Any) -> tuple[str, str, Script, RunOptions]:
    out, err, script = io.StringIO(), io.StringIO(), Script(*lines)
    options = RunOptions(model="smollm2:135m", **opts)
    Repl(Client(fake.host), options, script, out=out, err=err).run()
    return out.getvalue(), err.getvalue(), script, options


def test_repl_question_and_answer_keeps_history(model: FakeOllama) -> None:
    model.on("POST", "/api/chat", answer("Blue", " light.", key="message"))
    out, _, _, opts = repl(model, "Why is the sky blue?", "And red?")
    assert out == "Blue light.\n\nBlue light.\n\n\n"
    second = model.bodies("POST", "/api/chat")[1]["messages"]
    assert second == [{"role": "user", "content": "Why is the sky blue?"},
                      {"role": "assistant", "content": "Blue light."},
                      {"role": "user", "content": "And red?"}]


def test_repl_multiline_input(model: FakeOllama) -> None:
    model.on("POST", "/api/chat", answer("ok", key="message"))
    _, _, script, _ = repl(model, '"""Tell me', "about", 'cats"""', '"""one line"""')
    bodies = model.bodies("POST", "/api/chat")
    assert [b["messages"][-1]["content"] for b in bodies] == ["Tell me\nabout\ncats", "one line"]
    assert script.prompts[:4] == [">>> ", "... ", "... ", ">>> "]


def test_repl_set_parameter_and_show_parameters(model: FakeOllama) -> None:
    model.on("POST", "/api/chat", answer("ok", key="message"))
    out, _, _, opts = repl(model, "/set parameter temperature 0", "/set parameter stop a b", "/show parameters", "hi")
    assert out.splitlines()[:8] == [
        "Set parameter 'temperature' to '0'", "Set parameter 'stop' to 'a, b'", "Model defined parameters:",
        'stop                           "<|im_end|>"'.join(["  ", ""]), "", "User defined parameters:",
        "  temperature                    0", "  stop                           [a b]"]
    assert model.bodies("POST", "/api/chat")[0]["options"] == {"temperature": 0.0, "stop": ["a", "b"]}


def test_repl_bad_parameter(model: FakeOllama) -> None:
    out, _, _, opts = repl(model, "/set parameter temprature 1", "/set parameter num_ctx lots")
    assert out.splitlines() == ["Couldn't set parameter: \"unknown parameter 'temprature'\"",
                                'Couldn\'t set parameter: "invalid int value [lots]"', ""]
    assert opts.options == {}


def test_repl_show_commands(model: FakeOllama) -> None:
    out, err, _, _ = repl(model, "/show modelfile", "/show template", "/show license", "/show system", "/show info",
                          "/show nonsense")
    assert out.splitlines() == ["FROM /blobs/x", "", "{{ .Prompt }}", "No license was specified for this model.",
                                "You are SmolLM.", "", "Unknown command '/show nonsense'. Type /? for help", ""]
    assert err.startswith("  Model\n")


def test_repl_set_system_then_save(model: FakeOllama) -> None:
    model.on("POST", "/api/create", [{"status": "success"}])
    out, _, _, _ = repl(model, "/set system You are a pirate.", "/set parameter temperature 0.5", "/save pirate")
    assert out.splitlines()[-2:] == ["Created new model 'pirate'", ""]
    assert model.bodies("POST", "/api/create") == [{
        "model": "pirate", "stream": True, "from": "smollm2:135m", "system": "You are a pirate.",
        "parameters": {"temperature": 0.5}, "messages": [{"role": "system", "content": "You are a pirate."}]}]


def test_repl_multiline_system(model: FakeOllama) -> None:
    _, _, _, opts = repl(model, '/set system """Be', 'brief."""')
    assert opts.system == "Be\nbrief."


def test_repl_modes_and_format(model: FakeOllama) -> None:
    out, _, script, opts = repl(model, "/set verbose", "/set nowordwrap", "/set format json", "/set format yaml",
                                "/set nohistory", "/set quiet")
    assert out.splitlines() == ["Set 'verbose' mode.", "Set 'nowordwrap' mode.", "Set format to 'json' mode.",
                                "Invalid or missing format. For 'json' mode use '/set format json'",
                                "Set 'quiet' mode.", ""]
    assert (opts.verbose, opts.wordwrap, opts.format, script.history) == (False, False, "json", [False])


def test_repl_clear_keeps_the_system_message(model: FakeOllama) -> None:
    model.on("POST", "/api/chat", answer("ok", key="message"))
    _, _, _, opts = repl(model, "/set system Terse.", "hi", "/clear")
    assert opts.messages == [{"role": "system", "content": "Terse."}]


def test_repl_load_a_missing_model_keeps_the_current_one(fake: FakeOllama) -> None:
    fake.on("POST", "/api/show", (404, {"error": "model 'nope' not found"}))
    out, _, _, opts = repl(fake, "/load nope")
    assert out.splitlines()[:2] == ["Loading model 'nope'", "Couldn't find model 'nope'"]
    assert opts.model == "smollm2:135m"


def test_repl_help_unknown_and_bye(model: FakeOllama) -> None:
    out, err, script, _ = repl(model, "/?", "/nope", "/bye", "never read")
    assert err.startswith("Available Commands:\n  /set            Set session variables\n")
    assert out == "Unknown command '/nope'. Type /? for help\n"
    assert script.lines == ["never read"]


def test_repl_ctrl_c_on_an_empty_line_says_how_to_leave(model: FakeOllama) -> None:
    out, _, _, _ = repl(model, KeyboardInterrupt())
    assert out == "\nUse Ctrl + d or /bye to exit.\n\n"


def test_repl_server_error_keeps_the_session(fake: FakeOllama) -> None:
    fake.on("POST", "/api/chat", (500, {"error": "runner crashed"}))
    _, err, _, opts = repl(fake, "hi")
    assert err == "Error: runner crashed\n"
    assert opts.messages == []


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def test_run_attaches_image_paths_for_a_vision_model(fake: FakeOllama, tmp_path: Path) -> None:
    import base64

    fake.on("POST", "/api/show", {**SHOW, "capabilities": ["completion", "vision"]})
    fake.on("POST", "/api/generate", answer("A cat."))
    (tmp_path / "my cat.png").write_bytes(PNG)
    photo = str(tmp_path / "my cat.png").replace(" ", "\\ ")
    result = invoke(fake, ["run", "llava", f"What is in {photo}?"], tmp_path)
    assert result.exit_code == 0 and result.stdout == "A cat.\n\n"
    assert result.stderr == f"Added image '{tmp_path / 'my cat.png'}'\n"
    body = fake.bodies("POST", "/api/generate")[0]
    assert body["images"] == [base64.b64encode(PNG).decode()] and body["prompt"] == "What is in ?"


WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 28


def test_run_attaches_a_wav_for_an_audio_model(fake: FakeOllama, tmp_path: Path) -> None:
    """As Ollama's CLI: a .wav path is attached for a model with the audio capability, and said to be audio."""
    import base64

    fake.on("POST", "/api/show", {**SHOW, "capabilities": ["completion", "audio"]})
    fake.on("POST", "/api/generate", answer("Hello."))
    (tmp_path / "talk.wav").write_bytes(WAV)
    result = invoke(fake, ["run", "ear", f"Transcribe {tmp_path / 'talk.wav'}"], tmp_path)
    assert result.exit_code == 0 and result.stdout == "Hello.\n\n"
    assert result.stderr == f"Added audio '{tmp_path / 'talk.wav'}'\n"
    body = fake.bodies("POST", "/api/generate")[0]
    assert body["images"] == [base64.b64encode(WAV).decode()] and body["prompt"] == "Transcribe"


def test_repl_help_says_files_can_be_attached_to_a_multimodal_model(fake: FakeOllama) -> None:
    files = "Use /path/to/file to include .jpg, .png, .webp images, or .wav audio files.\n"
    _, err, _, _ = repl_vision(fake, "/?")
    assert err.endswith('Use """ to begin a multi-line message.\n' + files + "\n")
    out, err, _, _ = repl(fake, "/?")
    assert files not in out + err and 'Use """ to begin a multi-line message.' in out + err


def test_image_paths_stay_text_for_a_model_without_vision(model: FakeOllama, tmp_path: Path) -> None:
    model.on("POST", "/api/generate", answer("ok"))
    (tmp_path / "cat.png").write_bytes(PNG)
    invoke(model, ["run", "m", f"Look at {tmp_path / 'cat.png'}"], tmp_path)
    body = model.bodies("POST", "/api/generate")[0]
    assert "images" not in body and body["prompt"] == f"Look at {tmp_path / 'cat.png'}"


def test_repl_attaches_images_and_refuses_a_file_that_is_not_one(fake: FakeOllama, tmp_path: Path) -> None:
    fake.on("POST", "/api/show", {**SHOW, "capabilities": ["completion", "vision"]})
    fake.on("POST", "/api/chat", answer("A cat.", key="message"))
    (tmp_path / "cat.png").write_bytes(PNG)
    (tmp_path / "notes.png").write_text("just text")
    out, err, _, _ = repl_vision(fake, f"describe {tmp_path / 'notes.png'}", f"describe {tmp_path / 'cat.png'}")
    assert f"Error: {tmp_path / 'notes.png'}: invalid image type: text/plain\n" in err
    assert f"Added image '{tmp_path / 'cat.png'}'\n" in err
    (sent,) = fake.bodies("POST", "/api/chat")
    assert sent["messages"][-1]["content"] == "describe" and len(sent["messages"][-1]["images"]) == 1


def repl_vision(fake: FakeOllama, *lines: str) -> tuple[str, str, Script, RunOptions]:
    out, err, script = io.StringIO(), io.StringIO(), Script(*lines)
    options = RunOptions(model="llava")
    Repl(Client(fake.host), options, script, out=out, err=err, multimodal=True).run()
    return out.getvalue(), err.getvalue(), script, options
