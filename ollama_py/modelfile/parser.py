"""Parsing Modelfiles: text in, a `Modelfile` of `Command`s out, or a `ModelfileError` naming the line.

Grammar (Ollama's parser/parser.go, read as a state machine over characters):

    modelfile   := { blank | comment | instruction }
    comment     := [ws] "#" text-to-end-of-line           (only where an instruction could start)
    instruction := [ws] NAME ws+ args
    NAME        := ASCII letters, case-insensitive: from license template system adapter draft
                   renderer parser parameter message requires
    args        := value                                  most instructions
                 | PARAM ws+ value                        PARAMETER; PARAM is case-sensitive
                 | ROLE ws+ value                         MESSAGE; ROLE is system | user | assistant
    value       := text to the end of the line, trimmed of spaces and tabs
                 | '"' text '"'   | '\"\"\"' text '\"\"\"'      may span lines; the quotes are dropped
    ws          := " " | "\\t";  a line ends at "\\n", "\\r\\n" or "\\r"

A quoted value ends at the first line end where the text so far (trimmed) is a complete quoted string,
which is why there are no escapes: `\"\"\"` inside a value is fine unless it ends one of its lines.
At least one FROM is required. PARAMETER values are checked here with `parse_parameter` and REQUIRES
must be a semantic version, so a bad Modelfile fails at the line that is wrong.

Where this differs from Ollama, on purpose: "\\r\\n" counts as one line (Ollama counts two); extra blanks
before a parameter name or role are allowed; a parameter name or role is read up to the next blank, so
`PARAMETER top-k 3` says `unknown parameter 'top-k'` and `MESSAGE user: hi` names the bad role (Ollama says
`unexpected EOF` for both); unprintable characters in values are kept (Ollama drops them).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ollama_py.api.options import parse_parameter
from ollama_py.errors import BadRequest, ModelfileError

log = logging.getLogger(__name__)

# In the order Ollama's error message lists them.
INSTRUCTIONS: tuple[str, ...] = (
    "from", "license", "template", "system", "adapter", "draft", "renderer", "parser", "parameter", "message",
    "requires",
)  # fmt: skip
MESSAGE_ROLES: tuple[str, ...] = ("system", "user", "assistant")

ERR_COMMAND = (
    'command must be one of "from", "license", "template", "system", "adapter", "draft", "renderer", '
    '"parser", "parameter", "message", or "requires"'
)
ERR_ROLE = 'message role must be one of "system", "user", or "assistant"'
ERR_REQUIRES = "requires must be a valid semver (e.g. 0.14.0)"
ERR_EOF = "unexpected EOF"
ERR_NO_FROM = "no FROM line"

# golang.org/x/mod/semver after a "v" is prefixed: v1 and v1.2 are shorthands; pre-release/build need all three.
_NUM = r"(?:0|[1-9][0-9]*)"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_BUILD = r"[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*"
_SEMVER = re.compile(
    rf"v{_NUM}(?:\.{_NUM}(?:\.{_NUM}(?:-{_PRE_ID}(?:\.{_PRE_ID})*)?(?:\+{_BUILD})?)?)?\Z", re.ASCII
)

_BLANK = " \t"
_BREAK = "\r\n"


@dataclass(frozen=True, slots=True)
class Command:
    """One instruction. `name` is the lowercased instruction ("from", "template", ...) or, for PARAMETER, the
    parameter's own name ("temperature", "stop"); `args` is the value as written, quotes removed; `role` is
    set for "message" only."""

    name: str
    args: str
    role: str = field(default="", kw_only=True)


@dataclass
class Modelfile:
    """The commands of a Modelfile in file order, with the views /api/create needs.

    `warnings` holds what the parse skipped (deprecated parameters); it does not take part in equality.
    """

    commands: list[Command] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list, compare=False)

    def _args(self, name: str) -> list[str]:
        return [c.args for c in self.commands if c.name == name]

    def _last(self, name: str) -> str | None:
        found = self._args(name)
        return found[-1] if found else None

    @property
    def froms(self) -> list[str]:
        """Every FROM, in order (several FROM paths merge into one model's files)."""
        return self._args("from")

    @property
    def from_(self) -> str | None:
        """The first FROM: the base model name or path."""
        found = self.froms
        return found[0] if found else None

    @property
    def parameters(self) -> dict[str, Any]:
        """PARAMETER values typed by their option: `stop` accumulates into a list, the rest last-wins."""
        out: dict[str, Any] = {}
        for c in self.commands:
            if c.name in INSTRUCTIONS:
                continue
            value = parse_parameter(c.name, c.args)
            if value is None:
                continue
            if c.name == "stop":
                out.setdefault("stop", []).append(value)
            else:
                out[c.name] = value
        return out

    @property
    def template(self) -> str | None:
        return self._last("template")

    @property
    def system(self) -> str | None:
        return self._last("system")

    @property
    def adapters(self) -> list[str]:
        return self._args("adapter")

    @property
    def licenses(self) -> list[str]:
        return self._args("license")

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": c.role, "content": c.args} for c in self.commands if c.name == "message"]

    @property
    def requires(self) -> str | None:
        """The minimum Ollama version, without a leading "v"."""
        value = self._last("requires")
        return value.removeprefix("v") if value is not None else None

    @property
    def draft(self) -> str | None:
        return self._last("draft")

    @property
    def renderer(self) -> str | None:
        return self._last("renderer")

    @property
    def parser(self) -> str | None:
        return self._last("parser")


class _State(Enum):
    NIL = "nil"  # between instructions
    COMMENT = "comment"
    NAME = "name"  # the instruction word
    GAP = "gap"  # blanks before a parameter name or message role
    ARG = "arg"  # the parameter name or message role
    VALUE = "value"


def decode_modelfile(data: bytes) -> str:
    """Modelfile bytes as text: a UTF-16 (LE/BE) or UTF-8 byte-order mark picks the encoding, else UTF-8;
    undecodable bytes become U+FFFD, as Go's decoder does."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def parse_modelfile(text: str) -> Modelfile:
    """Parse Modelfile text (see the module docstring); ModelfileError(line, msg) on the first mistake."""
    return _Parser().run(text.removeprefix("\ufeff"))


def _unquote(raw: str) -> str | None:
    """The value of a trimmed buffer, or None while an opened quote is not closed yet."""
    if raw.startswith('"""'):
        return raw[3:-3] if len(raw) >= 6 and raw.endswith('"""') else None
    if raw.startswith('"'):
        return raw[1:-1] if len(raw) >= 2 and raw.endswith('"') else None
    return raw


class _Parser:
    def __init__(self) -> None:
        self.state = _State.NIL
        self.line = 1  # line of the character being read
        self.start = 1  # line where the current instruction began
        self.buf: list[str] = []
        self.name = ""  # lowercased instruction
        self.arg = ""  # parameter name or message role
        self.out = Modelfile()

    def run(self, text: str) -> Modelfile:
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            i += 1
            if ch == "\r" and i < n and text[i] == "\n":
                ch = "\r\n"
                i += 1
            self.step(ch)
            if ch in ("\n", "\r", "\r\n"):
                self.line += 1
        self.finish()
        if not any(c.name == "from" for c in self.out.commands):
            raise ModelfileError(0, ERR_NO_FROM)
        return self.out

    def fail(self, message: str, line: int | None = None) -> ModelfileError:
        return ModelfileError(self.start if line is None else line, message)

    def step(self, ch: str) -> None:
        is_break = ch[0] in _BREAK
        match self.state:
            case _State.NIL:
                if ch == "#":
                    self.state = _State.COMMENT
                elif not is_break and ch not in _BLANK:
                    self.start = self.line
                    self.buf = [ch]
                    self.state = _State.NAME
            case _State.COMMENT:
                if is_break:
                    self.state = _State.NIL
            case _State.NAME:
                if ch.isascii() and ch.isalpha():
                    self.buf.append(ch)
                elif ch in _BLANK:
                    self.begin_args("".join(self.buf))
                else:
                    raise self.fail(ERR_COMMAND, self.line)
            case _State.GAP:
                if is_break:
                    raise self.fail(ERR_EOF)
                if ch not in _BLANK:
                    self.buf = [ch]
                    self.state = _State.ARG
            case _State.ARG:
                if is_break:
                    raise self.fail(ERR_EOF)
                if ch in _BLANK:
                    self.end_arg("".join(self.buf))
                else:
                    self.buf.append(ch)
            case _State.VALUE:
                if is_break:
                    value = _unquote("".join(self.buf).strip(_BLANK))
                    if value is not None:
                        self.emit(value)
                        self.state = _State.NIL
                        return
                self.buf.append(ch)

    def begin_args(self, word: str) -> None:
        name = word.lower()
        if name not in INSTRUCTIONS:
            raise self.fail(ERR_COMMAND, self.line)
        self.name = name
        self.buf = []
        self.state = _State.GAP if name in ("parameter", "message") else _State.VALUE

    def end_arg(self, arg: str) -> None:
        if self.name == "message" and arg not in MESSAGE_ROLES:
            raise self.fail(ERR_ROLE)
        self.arg = arg
        self.buf = []
        self.state = _State.VALUE

    def finish(self) -> None:
        match self.state:
            case _State.NIL | _State.COMMENT:
                return
            case _State.VALUE:
                value = _unquote("".join(self.buf).strip(_BLANK))
                if value is None:
                    raise self.fail(ERR_EOF)
                self.emit(value)
            case _:
                raise self.fail(ERR_EOF)

    def emit(self, value: str) -> None:
        if self.name == "parameter":
            try:
                typed = parse_parameter(self.arg, value)
            except BadRequest as e:
                raise self.fail(e.message) from None
            if typed is None:
                self.out.warnings.append(f"parameter {self.arg} is deprecated")
                return
            command = Command(self.arg, value)
        elif self.name == "message":
            command = Command("message", value, role=self.arg)
        else:
            if self.name == "requires" and not _SEMVER.match(value if value.startswith("v") else "v" + value):
                raise self.fail(ERR_REQUIRES)
            command = Command(self.name, value)
        self.out.commands.append(command)
