"""The interactive `run` prompt, as Ollama's cmd/interactive.go: `>>> ` and `... `, `\"\"\"` multi-line input,
slash commands (/set, /show, /load, /save, /clear, /bye, /?), GNU readline editing and history.

Input comes from a `LineReader` so tests can script it; `ReadlineReader` is the terminal one. Ctrl-C while typing
drops the line (on an empty line it says how to leave), Ctrl-D leaves; Ctrl-C during an answer is handled in
session.chat, which closes the stream.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, TextIO

from ollama_py.api.options import parse_parameter
from ollama_py.cli.images import added, extract_images, multimodal
from ollama_py.cli.render import list_table, show_info
from ollama_py.cli.session import RunOptions, chat, load_model
from ollama_py.client import Client
from ollama_py.errors import BadRequest, NotFound, OllamaError

log = logging.getLogger(__name__)

PROMPT, ALT_PROMPT = ">>> ", "... "
QUOTES = '"""'

USAGE = """Available Commands:
  /set            Set session variables
  /show           Show model information
  /load <model>   Load a session or model
  /save <model>   Save your current session
  /clear          Clear session context
  /bye            Exit
  /?, /help       Help for a command
  /? shortcuts    Help for keyboard shortcuts

Use \"\"\" to begin a multi-line message.

"""

USAGE_FILES = "Use /path/to/file to include .jpg, .png, .webp images, or .wav audio files.\n"  # a multimodal model

USAGE_SET = """Available Commands:
  /set parameter ...     Set a parameter
  /set system <string>   Set system message
  /set history           Enable history
  /set nohistory         Disable history
  /set wordwrap          Enable wordwrap
  /set nowordwrap        Disable wordwrap
  /set format json       Enable JSON mode
  /set noformat          Disable formatting
  /set verbose           Show LLM stats
  /set quiet             Disable LLM stats
  /set think             Enable thinking
  /set nothink           Disable thinking

"""

USAGE_SHORTCUTS = """Available keyboard shortcuts:
  Ctrl + a            Move to the beginning of the line (Home)
  Ctrl + e            Move to the end of the line (End)
   Alt + b            Move back (left) one word
   Alt + f            Move forward (right) one word
  Ctrl + k            Delete the sentence after the cursor
  Ctrl + u            Delete the sentence before the cursor
  Ctrl + w            Delete the word before the cursor

  Ctrl + l            Clear the screen
  Ctrl + c            Stop the model from responding
  Ctrl + d            Exit ollama-py (/bye)

"""

USAGE_SHOW = """Available Commands:
  /show info         Show details for this model
  /show license      Show model license
  /show modelfile    Show Modelfile for this model
  /show parameters   Show parameters for this model
  /show system       Show system message
  /show template     Show prompt template

"""

USAGE_PARAMETERS = """Available Parameters:
  /set parameter seed <int>             Random number seed
  /set parameter num_predict <int>      Max number of tokens to predict
  /set parameter top_k <int>            Pick from top k num of tokens
  /set parameter top_p <float>          Pick token based on sum of probabilities
  /set parameter min_p <float>          Pick token based on top token probability * min_p
  /set parameter num_ctx <int>          Set the context size
  /set parameter temperature <float>    Set creativity level
  /set parameter repeat_penalty <float> How strongly to penalize repetitions
  /set parameter repeat_last_n <int>    Set how far back to look for repetitions
  /set parameter num_gpu <int>          The number of layers to send to the GPU
  /set parameter stop <string> <string> ...   Set the stop parameters

"""


class LineReader(Protocol):
    def read(self, prompt: str) -> str:
        """One line without its newline; EOFError on Ctrl-D, KeyboardInterrupt on Ctrl-C."""
        ...

    def pending(self) -> str:
        """What was typed on the line that Ctrl-C interrupted."""
        ...

    def set_history(self, enabled: bool) -> None: ...


class ReadlineReader:
    """GNU readline via input(): line editing, and history kept in `history_file` unless disabled."""

    def __init__(self, history_file: Path | None, enabled: bool = True) -> None:
        import readline

        self._readline = readline
        self.history_file = history_file
        self.enabled = enabled
        readline.set_history_length(1000)
        if history_file is not None:
            try:
                readline.read_history_file(history_file)
            except OSError:
                pass
        readline.set_auto_history(enabled)

    def read(self, prompt: str) -> str:
        line = input(prompt)
        if self.enabled and line.strip() and self.history_file is not None:
            try:
                self.history_file.parent.mkdir(parents=True, exist_ok=True)
                if not self.history_file.exists():
                    self.history_file.touch()
                self._readline.append_history_file(1, self.history_file)
            except OSError as e:
                log.debug("could not write history: %s", e)
        return line

    def pending(self) -> str:
        return self._readline.get_line_buffer()

    def set_history(self, enabled: bool) -> None:
        self.enabled = enabled
        self._readline.set_auto_history(enabled)


class _Multiline(Enum):
    NONE = 0
    PROMPT = 1
    SYSTEM = 2


def _go_value(value: Any) -> str:
    """A parameter value as Go's %v prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + " ".join(_go_value(v) for v in value) + "]"
    return str(value)


class Repl:
    """One interactive session over `client` with `opts`; `run()` returns when the user leaves."""

    def __init__(self, client: Client, opts: RunOptions, reader: LineReader, *, out: TextIO | None = None,
                 err: TextIO | None = None, multimodal: bool = False) -> None:
        self.client = client
        self.multimodal = multimodal  # image and .wav paths in a message are attached (the model takes them)
        self.opts = opts
        self.reader = reader
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._think_explicit = opts.think is not None

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def tell(self, text: str) -> None:
        """Help texts go to stderr, as Ollama's do."""
        self.err.write(text)
        self.err.flush()

    def run(self) -> None:
        buf: list[str] = []
        multiline = _Multiline.NONE
        while True:
            try:
                line = self.reader.read(ALT_PROMPT if multiline is not _Multiline.NONE else PROMPT)
            except EOFError:
                self.say()
                return
            except KeyboardInterrupt:
                if not self.reader.pending():
                    self.say("\nUse Ctrl + d or /bye to exit.")
                buf, multiline = [], _Multiline.NONE
                continue

            if multiline is not _Multiline.NONE:
                ended = line.endswith(QUOTES)
                buf.append(line[: -len(QUOTES)] if ended else line)
                if not ended:
                    continue
                if multiline is _Multiline.SYSTEM:
                    self.set_system("\n".join(buf))
                    buf = []
                multiline = _Multiline.NONE
            elif line.startswith(QUOTES):
                rest = line[len(QUOTES):]
                if rest.endswith(QUOTES) and rest:
                    buf.append(rest[: -len(QUOTES)])
                else:
                    buf.append(rest)
                    multiline = _Multiline.PROMPT
                    continue
            elif line.startswith("/"):
                args = line.split()
                try:
                    result = self.command(args)
                except KeyboardInterrupt:  # e.g. during /load or /save: back to the prompt
                    self.say()
                    continue
                if result == "exit":
                    return
                if isinstance(result, tuple):  # /set system \"\"\" ... : more lines to come
                    multiline, buf = _Multiline.SYSTEM, [result[1]]
                continue
            else:
                buf.append(line)

            text = "\n".join(buf)
            buf = []
            if text:
                try:
                    self.send(text)
                except KeyboardInterrupt:  # a second Ctrl-C while the first was being handled
                    self.say()

    # -- sending -----------------------------------------------------------------------------------------------

    def send(self, text: str) -> None:
        message: dict[str, Any] = {"role": "user", "content": text}
        if self.multimodal:
            try:
                message["content"], images, paths = extract_images(text)
            except OllamaError as e:
                self.tell(f"Error: {e}\n")
                return
            for path in paths:
                self.tell(added(path) + "\n")
            if images:
                message["images"] = images
        self.opts.messages.append(message)
        try:
            reply = chat(self.client, self.opts, self.out)
        except OllamaError as e:
            self.opts.messages.pop()
            self.tell(f"Error: {e}\n")
            return
        if reply.content or reply.thinking:
            message = {"role": reply.role, "content": reply.content}
            if reply.thinking:
                message["thinking"] = reply.thinking
            self.opts.messages.append(message)

    def set_system(self, text: str) -> None:
        self.opts.system = text
        message = {"role": "system", "content": text}
        if self.opts.messages and self.opts.messages[-1].get("role") == "system":
            self.opts.messages[-1] = message
        else:
            self.opts.messages.append(message)
        self.say("Set system message.")

    # -- commands ----------------------------------------------------------------------------------------------

    def command(self, args: list[str]) -> str | tuple[str, str] | None:
        """Run a slash command; "exit" to leave, ("system", first line) to start a multi-line system message."""
        name = args[0]
        if name in ("/bye", "/exit"):
            return "exit"
        if name in ("/?", "/help"):
            topic = args[1] if len(args) > 1 else ""
            help_text = {"set": USAGE_SET, "/set": USAGE_SET, "show": USAGE_SHOW, "/show": USAGE_SHOW,
                         "shortcut": USAGE_SHORTCUTS, "shortcuts": USAGE_SHORTCUTS}.get(topic, "" if topic else USAGE)
            if help_text is USAGE and self.multimodal:  # before its closing blank line, as Ollama's help says it
                help_text = USAGE[:-1] + USAGE_FILES + "\n"
            self.tell(help_text)
        elif name == "/set":
            return self.command_set(args)
        elif name == "/show":
            self.command_show(args)
        elif name == "/load":
            self.command_load(args)
        elif name == "/save":
            self.command_save(args)
        elif name == "/clear":
            self.opts.messages = [{"role": "system", "content": self.opts.system}] if self.opts.system else []
            self.say("Cleared session context")
        elif name == "/list":
            try:
                models = self.client.list().get("models", [])
                self.out.write(list_table(models, dt.datetime.now(dt.UTC), args[1] if len(args) > 1 else ""))
            except OllamaError as e:
                self.tell(f"Error: {e}\n")
        else:
            self.say(f"Unknown command '{name}'. Type /? for help")
        return None

    def command_set(self, args: list[str]) -> tuple[str, str] | None:
        if len(args) < 2:
            self.tell(USAGE_SET)
            return None
        what, opts = args[1], self.opts
        if what == "history":
            self.reader.set_history(True)
        elif what == "nohistory":
            self.reader.set_history(False)
        elif what in ("wordwrap", "nowordwrap"):
            opts.wordwrap = what == "wordwrap"
            self.say(f"Set '{what}' mode.")
        elif what in ("verbose", "quiet"):
            opts.verbose = what == "verbose"
            self.say(f"Set '{what}' mode.")
        elif what == "think":
            level = args[2] if len(args) > 2 else ""
            opts.think = level or True
            self._think_explicit = True
            self._warn_if_no_thinking()
            self.say(f"Set 'think' mode to '{level}'." if level else "Set 'think' mode.")
        elif what == "nothink":
            opts.think = False
            self._think_explicit = True
            self._warn_if_no_thinking()
            self.say("Set 'nothink' mode.")
        elif what == "format":
            if len(args) < 3 or args[2] != "json":
                self.say("Invalid or missing format. For 'json' mode use '/set format json'")
            else:
                opts.format = "json"
                self.say("Set format to 'json' mode.")
        elif what == "noformat":
            opts.format = ""
            self.say("Disabled format.")
        elif what == "parameter":
            self.set_parameter(args)
        elif what == "system":
            if len(args) < 3:
                self.tell(USAGE_SET)
                return None
            text = " ".join(args[2:])
            if text.startswith(QUOTES):
                text = text[len(QUOTES):]
                if not (text.endswith(QUOTES) and text):
                    return ("system", text)
                text = text[: -len(QUOTES)]
            self.set_system(text)
        else:
            self.say(f"Unknown command '/set {what}'. Type /? for help")
        return None

    def set_parameter(self, args: list[str]) -> None:
        if len(args) < 4:
            self.tell(USAGE_PARAMETERS)
            return
        name, values = args[2], args[3:]
        try:
            parsed = [parse_parameter(name, v) for v in (values if name == "stop" else values[:1])]
        except BadRequest as e:
            self.say(f"Couldn't set parameter: {json.dumps(str(e), ensure_ascii=False)}")
            return
        if parsed[0] is None:
            self.say(f"Couldn't set parameter: \"parameter {name} is deprecated\"")
            return
        self.opts.options[name] = parsed if name == "stop" else parsed[0]
        self.say(f"Set parameter '{name}' to '{', '.join(values)}'")

    def _warn_if_no_thinking(self) -> None:
        try:
            caps = self.client.show(self.opts.model).get("capabilities") or []
        except OllamaError:
            return
        if "thinking" not in caps:
            self.tell(f'warning: model "{self.opts.model}" does not support thinking output\n')

    def command_show(self, args: list[str]) -> None:
        if len(args) < 2:
            self.tell(USAGE_SHOW)
            return
        try:
            resp = self.client.show(self.opts.model, system=self.opts.system or None,
                                    options=dict(self.opts.options) or None)
        except OllamaError as e:
            self.say("error: couldn't get model")
            self.tell(f"Error: {e}\n")
            return
        what = args[1]
        if what == "info":
            self.tell(show_info(resp))
        elif what == "license":
            self.say(resp.get("license") or "No license was specified for this model.")
        elif what == "modelfile":
            self.say(resp.get("modelfile") or "")
        elif what == "parameters":
            self.say("Model defined parameters:")
            params = resp.get("parameters") or ""
            if not params:
                self.say("  No additional parameters were specified for this model.")
            for line in params.splitlines():
                self.say(f"  {line}")
            self.say()
            if self.opts.options:
                self.say("User defined parameters:")
                for key, value in self.opts.options.items():
                    self.say(f"  {key:<30} {_go_value(value)}")
                self.say()
        elif what == "system":
            system = self.opts.system or resp.get("system") or ""
            self.say(system + "\n" if system else "No system message was specified for this model.")
        elif what == "template":
            self.say(resp.get("template") or "No prompt template was specified for this model.")
        else:
            self.say(f"Unknown command '/show {what}'. Type /? for help")

    def command_load(self, args: list[str]) -> None:
        if len(args) != 2:
            self.say("Usage:\n  /load <modelname>")
            return
        previous = (self.opts.model, self.opts.messages, self.opts.think)
        self.opts.model, self.opts.messages = args[1], []
        self.say(f"Loading model '{self.opts.model}'")
        try:
            info = self.client.show(self.opts.model)
            if not self._think_explicit:
                self.opts.think = True if "thinking" in (info.get("capabilities") or []) else None
            load_model(self.client, self.opts)
            self.multimodal = multimodal(info.get("capabilities"))
        except NotFound:
            self.say(f"Couldn't find model '{self.opts.model}'")
            self.opts.model, self.opts.messages, self.opts.think = previous
        except OllamaError as e:
            self.tell(f"Error: {e}\n")
            self.opts.model, self.opts.messages, self.opts.think = previous

    def command_save(self, args: list[str]) -> None:
        if len(args) != 2:
            self.say("Usage:\n  /save <modelname>")
            return
        fields: dict[str, Any] = {"from_": self.opts.model}
        if self.opts.system:
            fields["system"] = self.opts.system
        if self.opts.options:
            fields["parameters"] = dict(self.opts.options)
        if self.opts.messages:
            fields["messages"] = [{"role": m["role"], "content": m.get("content", "")} for m in self.opts.messages]
        try:
            stream = self.client.create(args[1], **fields)
            for _ in stream:
                pass
        except OllamaError as e:
            if "invalid model name" in str(e):
                self.say(f"error: The model name '{args[1]}' is invalid")
            else:
                self.tell(f"Error: {e}\n")
            return
        self.say(f"Created new model '{args[1]}'")
