"""Go literal syntax inside template actions: numbers, 'c' character constants, "quoted" and `raw`
strings. Each function raises ValueError with Go's wording; the parser turns that into a
TemplateError.
"""

from __future__ import annotations

import re

_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
}
_OCTAL_INT = re.compile(r"[+-]?0[0-7_]+\Z")


def _parse_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 64): base prefixes, Go's leading-0 octal, underscores."""
    body = text.lstrip("+-")
    try:
        if _OCTAL_INT.match(text) and not body.startswith(("0x", "0X", "0o", "0O", "0b", "0B")):
            value = int(text.replace("0", "0o", 1) if body.startswith("0") else text, 0)
        else:
            value = int(text, 0)
    except ValueError:
        return None
    if not -(2**63) <= value < 2**64:
        return None
    return value


def _parse_float(text: str) -> float | None:
    clean = text.replace("_", "")
    body = clean.lstrip("+-")
    try:
        if body[:2].lower() == "0x":
            value = float.fromhex(clean)
        else:
            value = float(clean)
    except ValueError:
        return None
    return value


def parse_number(text: str) -> int | float:
    """The value Go's exec gives a number constant: float64 when the text has one of . e E p P
    (a hex integer like 0x1e excepted), else int."""
    as_int = _parse_int(text)
    as_float = float(as_int) if as_int is not None else _parse_float(text)
    floaty = any(c in text for c in ".eEpP")
    if as_float is None:
        raise ValueError(f'illegal number syntax: "{text}"')
    if as_int is None and not floaty:
        raise ValueError(f'integer overflow: "{text}"')
    hex_int = len(text) > 2 and text[0] == "0" and text[1] in "xX" and not any(c in text for c in "pP")
    if floaty and not hex_int:
        return as_float
    assert as_int is not None
    if as_int >= 2**63:
        raise ValueError(f"{text} overflows int")
    return as_int


def _unescape(body: str, quote: str) -> str:
    """strconv.Unquote's escape handling for the inside of a "..." or '...' literal."""
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == quote and quote == '"':
            raise ValueError("invalid syntax")
        if ch != "\\":
            out += ch.encode()
            i += 1
            continue
        i += 1
        if i >= len(body):
            raise ValueError("invalid syntax")
        esc = body[i]
        i += 1
        if esc in _SIMPLE_ESCAPES:
            out += _SIMPLE_ESCAPES[esc].encode()
        elif esc == quote:
            out += esc.encode()
        elif esc in "01234567":
            digits = body[i - 1 : i + 2]
            if len(digits) < 3 or any(d not in "01234567" for d in digits) or int(digits, 8) > 255:
                raise ValueError("invalid syntax")
            out.append(int(digits, 8))
            i += 2
        elif esc in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[esc]
            digits = body[i : i + width]
            if len(digits) < width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError("invalid syntax")
            code = int(digits, 16)
            i += width
            if esc == "x":
                out.append(code)
            else:
                if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise ValueError("invalid syntax")
                out += chr(code).encode()
        else:
            raise ValueError("invalid syntax")
    # \xNN may have produced bytes that are not UTF-8; Go would keep them raw.
    return out.decode("utf-8", errors="replace")


def unquote(token: str) -> str:
    """strconv.Unquote for "..." and `...` tokens."""
    if token.startswith("`"):
        if len(token) < 2 or not token.endswith("`"):
            raise ValueError("invalid syntax")
        return token[1:-1].replace("\r", "")  # Go drops carriage returns from raw strings
    if len(token) < 2 or not token.startswith('"') or not token.endswith('"'):
        raise ValueError("invalid syntax")
    return _unescape(token[1:-1], '"')


def parse_char(token: str) -> int:
    """A 'x' character constant is its code point (Go's rune, which prints as a number)."""
    body = token[1:-1]
    if body == "":
        raise ValueError(f"malformed character constant: {token}")
    if body[0] != "\\":
        if len(body) != 1:
            raise ValueError(f"malformed character constant: {token}")
        return ord(body)
    esc = body[1:2]
    if len(body) == 2 and (esc in _SIMPLE_ESCAPES or esc == "'"):
        return ord(_SIMPLE_ESCAPES.get(esc, esc))
    widths = {"x": 2, "u": 4, "U": 8}
    if esc in widths:
        digits = body[2:]
        if len(digits) != widths[esc] or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise ValueError("invalid syntax")
        code = int(digits, 16)
        if esc != "x" and (code > 0x10FFFF or 0xD800 <= code <= 0xDFFF):
            raise ValueError("invalid syntax")
        return code
    if esc in "01234567" and esc != "" and len(body) == 4 and all(d in "01234567" for d in body[1:]):
        code = int(body[1:], 8)
        if code > 255:
            raise ValueError("invalid syntax")
        return code
    raise ValueError("invalid syntax")
