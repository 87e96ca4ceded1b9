"""Tokenizer for Go text/template source, following Go's text/template/parse/lex.go.

The rules that shape Ollama prompts live here: an action `{{- ` trims the whitespace before it and
` -}}` the whitespace after it (the marker needs a space next to the dash: `{{-3}}` is the number
-3), comments are `{{/* ... */}}` with nothing between the delimiter and `/*`, and spaces, tabs and
newlines are all allowed inside actions.

Like Go's lexer, a lexical error does not raise at once: it becomes an ERROR token that ends the
stream, so the parser reports whichever problem comes first in the text.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from ollama_py.template.gofmt import go_quote

LEFT_DELIM = "{{"
RIGHT_DELIM = "}}"
LEFT_COMMENT = "/*"
RIGHT_COMMENT = "*/"
SPACE_CHARS = " \t\r\n"


class Tok(Enum):
    ERROR = auto()
    EOF = auto()
    TEXT = auto()
    LEFT_DELIM = auto()
    RIGHT_DELIM = auto()
    SPACE = auto()
    ASSIGN = auto()  # =
    DECLARE = auto()  # :=
    PIPE = auto()  # |
    CHAR = auto()  # other printable ASCII, e.g. ','
    STRING = auto()  # "quoted", still escaped
    RAW_STRING = auto()  # `raw`
    CHAR_CONSTANT = auto()  # 'x'
    NUMBER = auto()
    COMPLEX = auto()
    BOOL = auto()
    NIL = auto()
    DOT = auto()
    FIELD = auto()  # .Name
    VARIABLE = auto()  # $ or $name
    IDENTIFIER = auto()  # function name
    LEFT_PAREN = auto()
    RIGHT_PAREN = auto()
    # keywords
    BLOCK = auto()
    BREAK = auto()
    CONTINUE = auto()
    DEFINE = auto()
    ELSE = auto()
    END = auto()
    IF = auto()
    RANGE = auto()
    TEMPLATE = auto()
    WITH = auto()


KEYWORDS: dict[str, Tok] = {
    "block": Tok.BLOCK,
    "break": Tok.BREAK,
    "continue": Tok.CONTINUE,
    "define": Tok.DEFINE,
    "else": Tok.ELSE,
    "end": Tok.END,
    "if": Tok.IF,
    "range": Tok.RANGE,
    "template": Tok.TEMPLATE,
    "with": Tok.WITH,
    "nil": Tok.NIL,
}


@dataclass(frozen=True, slots=True)
class Token:
    typ: Tok
    val: str
    pos: int  # offset of the token in the source
    line: int  # 1-based line of the token's start

    def describe(self) -> str:
        """How Go's parser names a token in "unexpected X in Y" messages."""
        if self.typ is Tok.EOF:
            return "EOF"
        if self.typ is Tok.ERROR:
            return self.val
        if self.typ in _KEYWORD_TYPES:
            return f"<{self.val}>"
        if len(self.val) > 10:
            return go_quote(self.val[:10]) + "..."
        return go_quote(self.val)


# Go's item types past itemKeyword print as <val>: the keywords, nil and the dot among them.
_KEYWORD_TYPES = frozenset(KEYWORDS.values()) | {Tok.DOT}


def is_space(ch: str) -> bool:
    return ch != "" and ch in SPACE_CHARS


def is_alnum(ch: str) -> bool:
    """Go's isAlphaNumeric: underscore, any Unicode letter or decimal digit."""
    if ch == "":
        return False
    if ch == "_":
        return True
    cat = unicodedata.category(ch)
    return cat.startswith("L") or cat == "Nd"


def _has_left_trim(s: str, i: int) -> bool:
    return i + 1 < len(s) and s[i] == "-" and is_space(s[i + 1])


def _has_right_trim(s: str, i: int) -> bool:
    return i + 1 < len(s) and is_space(s[i]) and s[i + 1] == "-"


def _right_trim_len(s: str) -> int:
    return len(s) - len(s.rstrip(SPACE_CHARS))


def _left_trim_len(s: str) -> int:
    return len(s) - len(s.lstrip(SPACE_CHARS))


# A lexer state returns the next state, or None when the stream has ended (Go's stateFn).
_Next = Callable[[], Any] | None


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.start = 0
        self.line = 1
        self.start_line = 1
        self.paren_depth = 0
        self.tokens: list[Token] = []

    # -- helpers ---------------------------------------------------------------------------
    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def next(self) -> str:
        if self.pos >= len(self.text):
            self.pos += 1  # so that backup() is symmetric at EOF
            return ""
        ch = self.text[self.pos]
        self.pos += 1
        if ch == "\n":
            self.line += 1
        return ch

    def backup(self) -> None:
        self.pos -= 1
        if self.pos < len(self.text) and self.text[self.pos] == "\n":
            self.line -= 1

    def emit(self, typ: Tok) -> None:
        self.tokens.append(Token(typ, self.text[self.start : self.pos], self.start, self.start_line))
        self.ignore()

    def ignore(self) -> None:
        self.start = self.pos
        self.start_line = self.line

    def skip_to(self, pos: int) -> None:
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos

    def error(self, msg: str) -> None:
        self.tokens.append(Token(Tok.ERROR, msg, self.start, self.start_line))

    def at_right_delim(self) -> tuple[bool, bool]:
        if _has_right_trim(self.text, self.pos) and self.text.startswith(RIGHT_DELIM, self.pos + 2):
            return True, True
        if self.text.startswith(RIGHT_DELIM, self.pos):
            return True, False
        return False, False

    def at_terminator(self) -> bool:
        ch = self.peek()
        if ch == "" or is_space(ch) or ch in ".,|:()":
            return True
        return self.text.startswith(RIGHT_DELIM, self.pos)

    # -- states ----------------------------------------------------------------------------
    def run(self) -> list[Token]:
        state: _Next = self.lex_text
        while state is not None:
            state = state()
        return self.tokens

    def lex_text(self) -> _Next:
        x = self.text.find(LEFT_DELIM, self.pos)
        if x < 0:
            self.skip_to(len(self.text))
            if self.pos > self.start:
                self.emit(Tok.TEXT)
            self.tokens.append(Token(Tok.EOF, "", self.pos, self.line))
            return None
        if x > self.pos:
            self.skip_to(x)
            trim = 0
            if _has_left_trim(self.text, x + len(LEFT_DELIM)):
                trim = _right_trim_len(self.text[self.start : x])
            end = x - trim
            if end > self.start:
                self.tokens.append(Token(Tok.TEXT, self.text[self.start : end], self.start, self.start_line))
            self.ignore()
        return self.lex_left_delim

    def lex_left_delim(self) -> _Next:
        self.pos += len(LEFT_DELIM)
        trim = _has_left_trim(self.text, self.pos)
        after = 2 if trim else 0
        if self.text.startswith(LEFT_COMMENT, self.pos + after):
            self.skip_to(self.pos + after)
            self.ignore()
            return self.lex_comment
        self.emit(Tok.LEFT_DELIM)
        self.skip_to(self.pos + after)
        self.ignore()
        self.paren_depth = 0
        return self.lex_inside_action

    def lex_comment(self) -> _Next:
        self.pos += len(LEFT_COMMENT)
        x = self.text.find(RIGHT_COMMENT, self.pos)
        if x < 0:
            self.error("unclosed comment")
            return None
        self.skip_to(x + len(RIGHT_COMMENT))
        delim, trim = self.at_right_delim()
        if not delim:
            self.error("comment ends before closing delimiter")
            return None
        if trim:
            self.skip_to(self.pos + 2)  # the marker's space may be a newline
        self.pos += len(RIGHT_DELIM)
        if trim:
            self.skip_to(self.pos + _left_trim_len(self.text[self.pos :]))
        self.ignore()  # comments are dropped, as Go does unless asked to keep them
        return self.lex_text

    def lex_right_delim(self) -> _Next:
        _, trim = self.at_right_delim()
        if trim:
            self.skip_to(self.pos + 2)  # the marker's space may be a newline
            self.ignore()
        self.pos += len(RIGHT_DELIM)
        self.emit(Tok.RIGHT_DELIM)
        if trim:
            self.skip_to(self.pos + _left_trim_len(self.text[self.pos :]))
            self.ignore()
        return self.lex_text

    def lex_inside_action(self) -> _Next:
        delim, _ = self.at_right_delim()
        if delim:
            if self.paren_depth == 0:
                return self.lex_right_delim
            self.error("unclosed left paren")
            return None
        ch = self.next()
        if ch == "":
            self.error("unclosed action")
            return None
        if is_space(ch):
            self.backup()
            return self.lex_space
        if ch == "=":
            self.emit(Tok.ASSIGN)
        elif ch == ":":
            if self.next() != "=":
                self.error("expected :=")
                return None
            self.emit(Tok.DECLARE)
        elif ch == "|":
            self.emit(Tok.PIPE)
        elif ch == '"':
            return self.lex_quote
        elif ch == "`":
            return self.lex_raw_quote
        elif ch == "$":
            return self.lex_variable
        elif ch == "'":
            return self.lex_char
        elif ch == "." and self.peek() != "" and not ("0" <= self.peek() <= "9"):
            return self.lex_field
        elif ch in "+-." or "0" <= ch <= "9":
            self.backup()
            return self.lex_number
        elif is_alnum(ch):
            self.backup()
            return self.lex_identifier
        elif ch == "(":
            self.paren_depth += 1
            self.emit(Tok.LEFT_PAREN)
        elif ch == ")":
            self.paren_depth -= 1
            if self.paren_depth < 0:
                self.error("unexpected right paren")
                return None
            self.emit(Tok.RIGHT_PAREN)
        elif ord(ch) < 0x80 and ch.isprintable():
            self.emit(Tok.CHAR)
        else:
            self.error(f"unrecognized character in action: {_go_rune(ch)}")
            return None
        return self.lex_inside_action

    def lex_space(self) -> _Next:
        count = 0
        while is_space(self.peek()):
            self.next()
            count += 1
        # A trim-marked right delimiter starts with a space: leave that space to it.
        if _has_right_trim(self.text, self.pos - 1) and self.text.startswith(RIGHT_DELIM, self.pos + 1):
            self.backup()
            if count == 1:
                return self.lex_inside_action
        self.emit(Tok.SPACE)
        return self.lex_inside_action

    def lex_identifier(self) -> _Next:
        while True:
            ch = self.next()
            if not is_alnum(ch):
                self.backup()
                break
        word = self.text[self.start : self.pos]
        if not self.at_terminator():
            self.error(f"bad character {_go_rune(self.peek())}")
            return None
        if word in KEYWORDS:
            self.emit(KEYWORDS[word])
        elif word in ("true", "false"):
            self.emit(Tok.BOOL)
        else:
            self.emit(Tok.IDENTIFIER)
        return self.lex_inside_action

    def lex_field(self) -> _Next:
        return self._field_or_variable(Tok.FIELD)

    def lex_variable(self) -> _Next:
        return self._field_or_variable(Tok.VARIABLE)

    def _field_or_variable(self, typ: Tok) -> _Next:
        if self.at_terminator():
            self.emit(Tok.VARIABLE if typ is Tok.VARIABLE else Tok.DOT)
            return self.lex_inside_action
        while True:
            ch = self.next()
            if not is_alnum(ch):
                self.backup()
                break
        if not self.at_terminator():
            self.error(f"bad character {_go_rune(self.peek())}")
            return None
        self.emit(typ)
        return self.lex_inside_action

    def lex_char(self) -> _Next:
        while True:
            ch = self.next()
            if ch == "\\":
                if self.next() not in ("", "\n"):
                    continue
                self.error("unterminated character constant")
                return None
            if ch in ("", "\n"):
                self.error("unterminated character constant")
                return None
            if ch == "'":
                break
        self.emit(Tok.CHAR_CONSTANT)
        return self.lex_inside_action

    def lex_quote(self) -> _Next:
        while True:
            ch = self.next()
            if ch == "\\":
                if self.next() not in ("", "\n"):
                    continue
                self.error("unterminated quoted string")
                return None
            if ch in ("", "\n"):
                self.error("unterminated quoted string")
                return None
            if ch == '"':
                break
        self.emit(Tok.STRING)
        return self.lex_inside_action

    def lex_raw_quote(self) -> _Next:
        end = self.text.find("`", self.pos)
        if end < 0:
            self.error("unterminated raw quoted string")
            return None
        self.skip_to(end + 1)
        self.emit(Tok.RAW_STRING)
        return self.lex_inside_action

    def lex_number(self) -> _Next:
        if not self._scan_number():
            self.error(f"bad number syntax: {go_quote(self.text[self.start : self.pos])}")
            return None
        ch = self.peek()
        if ch in "+-" and ch != "":
            # Complex: 1+2i. The template language has no complex arithmetic we support,
            # but lex it like Go so the parser can name it.
            if not self._scan_number() or self.text[self.pos - 1] != "i":
                self.error(f"bad number syntax: {go_quote(self.text[self.start : self.pos])}")
                return None
            self.emit(Tok.COMPLEX)
        else:
            self.emit(Tok.NUMBER)
        return self.lex_inside_action

    def _accept(self, valid: str) -> bool:
        ch = self.next()
        if ch != "" and ch in valid:
            return True
        self.backup()
        return False

    def _accept_run(self, valid: str) -> None:
        while True:
            ch = self.next()
            if ch == "" or ch not in valid:
                self.backup()
                return

    def _scan_number(self) -> bool:
        self._accept("+-")
        digits = "0123456789_"
        if self._accept("0"):
            if self._accept("xX"):
                digits = "0123456789abcdefABCDEF_"
            elif self._accept("oO"):
                digits = "01234567_"
            elif self._accept("bB"):
                digits = "01_"
        self._accept_run(digits)
        if self._accept("."):
            self._accept_run(digits)
        if len(digits) == 10 + 1 and self._accept("eE"):
            self._accept("+-")
            self._accept_run("0123456789_")
        if len(digits) == 16 + 6 + 1 and self._accept("pP"):
            self._accept("+-")
            self._accept_run("0123456789_")
        self._accept("i")
        if is_alnum(self.peek()):
            self.next()
            return False
        return True


def _go_rune(ch: str) -> str:
    """Go's %#U: U+002F '/'."""
    if ch == "":
        return "U+FFFFFFFF"  # what Go prints for eof (-1) is odd; nobody matches on it
    return f"U+{ord(ch):04X} '{ch}'" if ch.isprintable() else f"U+{ord(ch):04X}"


def lex(text: str) -> list[Token]:
    """Tokens of `text`, ending with an EOF token or, at the first lexical error, an ERROR token."""
    return _Lexer(text).run()
