"""Go's fmt package as templates see it: %v printing of values, print/println, and printf.

Only what templates can reach is here: values from `values.py`, verbs v s d q t T f F e E g G x X
o b c U and %%, flags `+ - # 0 space`, width and precision (numbers or `*`). Bad or missing
arguments print Go's in-band markers (`%!d(string=hi)`, `%!s(MISSING)`, `%!(EXTRA int=1)`).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from ollama_py.errors import TemplateError
from ollama_py.template.values import GoNamed, GoStruct, go_type_name


# -- floats ---------------------------------------------------------------------------------
def shortest_digits(f: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits of |f| and the decimal point position:
    |f| == 0.DIGITS x 10**dp. Zero gives ("", 0)."""
    if f == 0:
        return "", 0
    sign, digits, exp = Decimal(repr(abs(f))).as_tuple()
    text = "".join(map(str, digits)).lstrip("0")
    stripped = text.rstrip("0")
    exp = int(exp) + (len(text) - len(stripped))
    return stripped, len(stripped) + exp


def _fmt_e(neg: bool, digits: str, dp: int, upper: bool = False) -> str:
    digits = digits or "0"
    exp = dp - 1 if digits != "0" else 0
    mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    e = "E" if upper else "e"
    return ("-" if neg else "") + f"{mant}{e}{'-' if exp < 0 else '+'}{abs(exp):02d}"


def _fmt_f(neg: bool, digits: str, dp: int) -> str:
    if not digits:
        body = "0"
    elif dp <= 0:
        body = "0." + "0" * (-dp) + digits
    elif dp >= len(digits):
        body = digits + "0" * (dp - len(digits))
    else:
        body = digits[:dp] + "." + digits[dp:]
    return ("-" if neg else "") + body


def format_float_g(f: float, upper: bool = False) -> str:
    """strconv.FormatFloat(f, 'g', -1, 64), which is what %v prints for a float64."""
    if f != f:
        return "NaN"
    if f in (float("inf"), float("-inf")):
        return "+Inf" if f > 0 else "-Inf"
    neg = f < 0 or (f == 0 and str(f).startswith("-"))
    digits, dp = shortest_digits(f)
    exp = dp - 1
    if digits and (exp < -4 or exp >= 6):  # Go uses precision 6 for this choice when shortest
        return _fmt_e(neg, digits, dp, upper)
    return _fmt_f(neg, digits, dp)


def format_float_json(f: float) -> str:
    """encoding/json's float64 form: fixed notation, or exponent outside [1e-6, 1e21)."""
    neg = f < 0 or (f == 0 and str(f).startswith("-"))
    digits, dp = shortest_digits(f)
    if digits and (abs(f) < 1e-6 or abs(f) >= 1e21):
        text = _fmt_e(neg, digits, dp)
        return re.sub(r"e([+-])0(\d)$", r"e\1\2", text)  # e-07 -> e-7
    return _fmt_f(neg, digits, dp)


# -- %v ---------------------------------------------------------------------------------------
def format_value(value: Any, *, depth: int = 0, plus: bool = False, action: bool = False) -> str:
    """fmt's %v. `action` is how a template action prints its result: a top-level pointer is
    dereferenced first (Go's printableValue), so a *struct shows as {...}, not &{...}."""
    if isinstance(value, GoStruct):
        if value.string is not None:
            return value.string(value)
        if value.pointer and depth > 0:
            raise TemplateError(f"cannot print a {value.go_type} nested in another value: Go prints its memory address")
        body = " ".join(
            (f"{name}:" if plus else "") + format_value(v, depth=depth + 1, plus=plus)
            for name, v in value.fields.items()
        )
        prefix = "&" if value.pointer and not action else ""
        return prefix + "{" + body + "}"
    if isinstance(value, GoNamed):
        if value.string is not None:
            return value.string(value)
        return format_value(value.contents(), depth=depth, plus=plus)
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float_g(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return "[" + " ".join(str(b) for b in value) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(format_value(v, depth=depth + 1, plus=plus) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted_items(value)
        inner = " ".join(
            format_value(k, depth=depth + 1) + ":" + format_value(v, depth=depth + 1, plus=plus) for k, v in items
        )
        return "map[" + inner + "]"
    raise TemplateError(f"cannot print a value of Python type {type(value).__name__}")


def sorted_items(d: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """Map entries in Go's fmtsort order: numbers numerically, strings bytewise."""

    def key(item: tuple[Any, Any]) -> tuple[int, Any]:
        k = item[0]
        if isinstance(k, bool):
            return (0, int(k))
        if isinstance(k, (int, float)):
            return (1, k)
        if isinstance(k, str):
            return (2, k.encode("utf-8", errors="surrogatepass"))
        return (3, repr(k))

    return sorted(d.items(), key=key)


def sprint(args: list[Any]) -> str:
    """fmt.Sprint: a space between operands when neither side is a string."""
    out: list[str] = []
    prev_string = False
    for i, arg in enumerate(args):
        is_string = isinstance(arg, str)
        if i > 0 and not is_string and not prev_string:
            out.append(" ")
        out.append(format_value(arg))
        prev_string = is_string
    return "".join(out)


def sprintln(args: list[Any]) -> str:
    """fmt.Sprintln: spaces between all operands and a trailing newline."""
    return " ".join(format_value(a) for a in args) + "\n"


# -- printf -----------------------------------------------------------------------------------
# flags, width, precision (only when something follows the dot, as in Go), verb
_SPEC = re.compile(r"%([-+# 0]*)(\*|\d+)?(?:\.(?=.)(\*|\d*))?(.?)", re.DOTALL)


def _bad(verb: str, arg: Any) -> str:
    if arg is None:
        return f"%!{verb}(<nil>)"
    return f"%!{verb}({go_type_name(arg)}={format_value(arg)})"


def go_quote(s: str, ascii_only: bool = False) -> str:
    """strconv.Quote: Go escapes, printable Unicode kept (or \\u-escaped with %+q)."""
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(ch)])
        elif code < 0x80 and ch.isprintable() or code >= 0x80 and ch.isprintable() and not ascii_only:
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _pad(text: str, width: int | None, minus: bool, zero: bool) -> str:
    if width is None or len(text) >= width:
        return text
    fill = width - len(text)
    if minus:
        return text + " " * fill
    if zero and text[:1] in "+-" and text[1:2].isdigit():
        return text[0] + "0" * fill + text[1:]
    return ("0" if zero else " ") * fill + text


def _format_int(n: int, verb: str, flags: str, prec: int | None) -> str:
    base = {"d": 10, "x": 16, "X": 16, "o": 8, "O": 8, "b": 2}[verb]
    digits = format(abs(n), {10: "d", 16: "x", 8: "o", 2: "b"}[base])
    if verb == "X":
        digits = digits.upper()
    if prec is not None:
        digits = "" if prec == 0 and n == 0 else digits.rjust(prec, "0")
    prefix = ""
    if verb == "O":
        prefix = "0o"
    elif "#" in flags:
        prefix = {"x": "0x", "X": "0X", "o": "0", "b": "0b"}.get(verb, "")
    sign = "-" if n < 0 else ("+" if "+" in flags else (" " if " " in flags else ""))
    return sign + prefix + digits


def _format_float(f: float, verb: str, flags: str, prec: int | None) -> str:
    if f != f or f in (float("inf"), float("-inf")):
        text = format_float_g(f)
        return ("+" + text) if "+" in flags and f == f and f > 0 else text
    if verb in "vgG" and prec is None:
        text = format_float_g(f, upper=verb == "G")
    elif verb in "fF":
        text = format(f, f".{6 if prec is None else prec}f")
    elif verb in "eE":
        text = format(f, f".{6 if prec is None else prec}{verb}")
    else:  # %g / %G with a precision: p significant digits, %e form outside [1e-4, 10**p)
        p = max(prec or 0, 1)
        e_form = format(abs(f), f".{p - 1}e")
        mant, exp_s = e_form.split("e")
        exp = int(exp_s)
        digits = mant.replace(".", "").rstrip("0") or "0"
        eprec = p if not (p > len(digits) and len(digits) >= exp + 1) else len(digits)
        neg = f < 0 or (f == 0 and str(f).startswith("-"))
        if exp < -4 or exp >= eprec:
            text = _fmt_e(neg, digits, exp + 1, upper=verb == "G")
        else:
            text = _fmt_f(neg, digits if f != 0 else "", exp + 1)
    if "+" in flags and not text.startswith("-"):
        text = "+" + text
    elif " " in flags and not text.startswith("-"):
        text = " " + text
    return text


def _format_one(verb: str, flags: str, prec: int | None, arg: Any) -> str:
    """One verb applied to one argument (before padding)."""
    if verb == "T":
        return go_type_name(arg)
    if isinstance(arg, GoNamed) and arg.string is None:
        arg = arg.contents()
    if verb == "v":
        if isinstance(arg, str) and "#" in flags:
            return go_quote(arg)
        if isinstance(arg, float):
            return _format_float(arg, "g", flags, prec)
        if isinstance(arg, int) and not isinstance(arg, bool) and "+" in flags:
            return _format_int(arg, "d", flags, None)
        return format_value(arg, plus="+" in flags)
    if isinstance(arg, GoStruct) and arg.string is not None and verb in "sqvxX":  # noqa: SIM114 - String() typed per class
        arg = arg.string(arg)
    elif isinstance(arg, GoNamed) and arg.string is not None and verb in "sqvxX":
        arg = arg.string(arg)
    if isinstance(arg, dict):
        inner = " ".join(
            _format_one(verb, flags, prec, k) + ":" + _format_one(verb, flags, prec, v)
            for k, v in sorted_items(arg)
        )
        return "map[" + inner + "]"
    if isinstance(arg, (list, tuple)) and verb != "q":
        return "[" + " ".join(_format_one(verb, flags, prec, v) for v in arg) + "]"
    if verb == "s":
        if isinstance(arg, str):
            return arg if prec is None else arg[:prec]
        if isinstance(arg, (bytes, bytearray)):
            return bytes(arg).decode("utf-8", errors="replace")
        return _bad(verb, arg)
    if verb == "q":
        if isinstance(arg, str):
            if "#" in flags and "`" not in arg and all(c.isprintable() or c == "\t" for c in arg):
                return "`" + arg + "`"
            return go_quote(arg, ascii_only="+" in flags)
        if isinstance(arg, int) and not isinstance(arg, bool):
            return "'" + go_quote(chr(arg) if 0 <= arg <= 0x10FFFF else "\ufffd")[1:-1].replace("'", "\\'") + "'"
        return _bad(verb, arg)
    if verb == "t":
        return ("true" if arg else "false") if isinstance(arg, bool) else _bad(verb, arg)
    if isinstance(arg, bool):
        return _bad(verb, arg)
    if verb in "dxXobO":
        if isinstance(arg, int):
            return _format_int(arg, verb, flags, prec)
        if verb in "xX" and isinstance(arg, (str, bytes, bytearray)):
            data = arg.encode() if isinstance(arg, str) else bytes(arg)
            text = data.hex()
            return text.upper() if verb == "X" else text
        return _bad(verb, arg)
    if verb in "fFeEgG":
        if isinstance(arg, float):
            return _format_float(arg, verb, flags, prec)
        return _bad(verb, arg)
    if verb == "c":
        return chr(arg) if isinstance(arg, int) and 0 <= arg <= 0x10FFFF else _bad(verb, arg)
    if verb == "U":
        if isinstance(arg, int):
            text = f"U+{arg:04X}"
            return text + (f" '{chr(arg)}'" if "#" in flags and chr(arg).isprintable() else "")
        return _bad(verb, arg)
    return _bad(verb, arg)


_MAX_WIDTH = 1_000_000  # fmt's tooLarge: a width or precision past this is refused


def _parsenum(digits: str) -> int | None:
    """fmt's parsenum: the number, or None once it grows past _MAX_WIDTH with digits still to come (Go then
    gives up on the rest of the format: "crazy long number most likely")."""
    num = 0
    for ch in digits:
        if num > _MAX_WIDTH:
            return None
        num = num * 10 + ord(ch) - 48
    return num


def _int_arg(args: list[Any], argi: int) -> int | None:
    """fmt's intFromArg: the int argument for a `*` width or precision, None if it is missing, not an int or
    too large."""
    if (argi < len(args) and isinstance(args[argi], int) and not isinstance(args[argi], bool)
            and -_MAX_WIDTH <= args[argi] <= _MAX_WIDTH):
        return args[argi]
    return None


class OutputTooLong(Exception):
    """sprintf's result would pass the caller's limit (which the template executor sets)."""


def sprintf(fmt: str, args: list[Any], limit: int | None = None) -> str:
    """fmt.Sprintf for the verbs templates use. Widths and precisions are capped as Go caps them; with a
    `limit`, a result longer than `limit` characters raises OutputTooLong as soon as it gets there."""
    out: list[str] = []
    size = 0
    argi = 0
    pos = 0
    while True:
        i = fmt.find("%", pos)
        if i < 0:
            out.append(fmt[pos:])
            break
        out.append(fmt[pos:i])
        start = pos
        m = _SPEC.match(fmt, i)
        assert m is not None
        flags, width_s, prec_s, verb = m.group(1), m.group(2), m.group(3), m.group(4)
        pos = m.end()
        width: int | None = None
        prec: int | None = None
        if width_s == "*":
            width = _int_arg(args, argi)
            if width is None:
                out.append("%!(BADWIDTH)")
            elif width < 0:
                flags += "-"
                width = -width
            argi += 1
        elif width_s:
            width = _parsenum(width_s)
            if width is None:
                out.append("%!(NOVERB)")
                break
        if prec_s == "*":
            prec = _int_arg(args, argi)
            if prec is None or prec < 0:
                prec = None
                out.append("%!(BADPREC)")
            argi += 1
        elif prec_s is not None:
            prec = _parsenum(prec_s) if prec_s else 0
            if prec is None:
                out.append("%!(NOVERB)")
                break
        if verb == "":
            out.append("%!(NOVERB)")
            break
        if verb == "%":
            out.append("%")
            continue
        if argi >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        arg = args[argi]
        argi += 1
        text = _format_one(verb, flags, prec, arg)
        numeric = isinstance(arg, (int, float)) and not isinstance(arg, bool)
        out.append(_pad(text, width, "-" in flags, "0" in flags and numeric and "-" not in flags))
        if limit is not None:
            size += len(out[-1]) + i - start
            if size > limit:
                raise OutputTooLong(f"printf's result passes the limit of {limit} characters")
    if argi < len(args):
        extra = ", ".join(
            "<nil>" if a is None else f"{go_type_name(a)}={format_value(a)}" for a in args[argi:]
        )
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)
