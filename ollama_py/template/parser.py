"""Recursive-descent parser for Go templates, following Go's text/template/parse/parse.go.

Grammar (the subset we accept; Go accepts more, and we name what we refuse):

    template  := { text | action | definition }
    definition:= "{{" "define" string "}}" list "end"      (top level only, as in Go)
    action    := "{{" ( pipeline | control ) "}}"
    control   := "if" pipeline list { "else if" pipeline list } [ "else" list ] "end"
               | "with" pipeline list { "else with" pipeline list } [ "else" list ] "end"
               | "range" [ var [ "," var ] ( ":=" | "=" ) ] pipeline list [ "else" list ] "end"
               | "template" string [ pipeline ]
               | "block" string pipeline list "end"        (a definition, run in place)
               | "break" | "continue"                       (inside range only)
    pipeline  := [ var ( ":=" | "=" ) ] command { "|" command }
    command   := operand { operand }
    operand   := term { .Field }
    term      := literal | "nil" | "." | .Field | $var | function | "(" pipeline ")"

Named templates follow Go's rules within one Parse: a definition's body starts a fresh variable scope and is
outside any range; an empty body (white space only) never replaces one that has a body, a body replaces an empty
one, and two bodies for one name are "multiple definition of template". The main template is the one named "".

The `call` builtin and complex numbers are refused with a TemplateError naming the construct and its position,
rather than being half-supported. Errors use Go's wording ("template: :LINE: ...") so that messages match what
Ollama returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ollama_py.errors import TemplateError
from ollama_py.template import nodes as n
from ollama_py.template.gofmt import go_quote
from ollama_py.template.lexer import Tok, Token, lex
from ollama_py.template.literals import parse_char, parse_number, unquote

_OPERAND_START = frozenset(
    {
        Tok.BOOL,
        Tok.CHAR_CONSTANT,
        Tok.COMPLEX,
        Tok.DOT,
        Tok.FIELD,
        Tok.IDENTIFIER,
        Tok.NUMBER,
        Tok.NIL,
        Tok.RAW_STRING,
        Tok.STRING,
        Tok.VARIABLE,
        Tok.LEFT_PAREN,
    }
)

_T = TypeVar("_T")


class _End:
    """Marker returned by text_or_action for {{end}} and {{else}}."""

    def __init__(self, kind: str, token: Token) -> None:
        self.kind = kind  # "end" | "else"
        self.token = token


class Parser:
    def __init__(self, text: str, funcs: frozenset[str]) -> None:
        self.text = text
        self.funcs = funcs
        self.tokens = lex(text)
        self.i = 0
        self.last = self.tokens[0]
        self.vars: list[str] = ["$"]
        self.range_depth = 0
        self.named: dict[str, n.ListNode] = {}  # the named templates, "" (the main one) added last

    # -- errors ----------------------------------------------------------------------------
    def error(self, msg: str) -> TemplateError:
        return TemplateError(f"template: :{self.last.line}: {msg}")

    def unsupported(self, token: Token, what: str) -> TemplateError:
        col = token.pos - (self.text.rfind("\n", 0, token.pos) + 1) + 1
        return TemplateError(f"template: :{token.line}:{col}: {what} is not supported")

    def unexpected(self, token: Token, context: str) -> TemplateError:
        if token.typ is Tok.ERROR:
            return self.error(token.val)
        return self.error(f"unexpected {token.describe()} in {context}")

    # -- token stream ----------------------------------------------------------------------
    def _at(self, i: int) -> Token:
        # The stream ends with EOF or ERROR, which repeats forever (as Go's lexer does).
        return self.tokens[min(i, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self._at(self.i)
        self.i += 1
        self.last = tok
        return tok

    def backup(self, count: int = 1) -> None:
        self.i -= count

    def peek(self) -> Token:
        return self._at(self.i)

    def next_non_space(self) -> Token:
        tok = self.next()
        while tok.typ is Tok.SPACE:
            tok = self.next()
        return tok

    def peek_non_space(self) -> Token:
        j = self.i
        while self._at(j).typ is Tok.SPACE:
            j += 1
        return self._at(j)

    def expect(self, typ: Tok, context: str) -> Token:
        tok = self.next_non_space()
        if tok.typ is not typ:
            raise self.unexpected(tok, context)
        return tok

    # -- structure -------------------------------------------------------------------------
    def parse(self) -> tuple[n.ListNode, dict[str, n.ListNode]]:
        """The main template and the named ones (without "")."""
        items: list[n.Node] = []
        while self.peek().typ is not Tok.EOF:
            if self.peek().typ is Tok.LEFT_DELIM:
                mark = self.i
                self.next()
                if self.next_non_space().typ is Tok.DEFINE:
                    self.definition()
                    continue
                self.i = mark
            item = self.text_or_action()
            if isinstance(item, _End):
                raise self.error(f"unexpected {{{{{item.kind}}}}}")
            items.append(item)
        self.add("", n.ListNode(0, tuple(items)))
        main = self.named.pop("")  # {{define ""}} with an empty main template is the main template, as in Go
        return main, self.named

    def add(self, name: str, body: n.ListNode) -> None:
        existing = self.named.get(name)
        if existing is None or n.is_empty_tree(existing):
            self.named[name] = body
        elif not n.is_empty_tree(body):
            raise self.error(f"template: multiple definition of template {go_quote(name)}")

    def definition(self) -> None:
        context = "define clause"
        tok = self.next_non_space()
        if tok.typ not in (Tok.STRING, Tok.RAW_STRING):
            raise self.unexpected(tok, context)
        name = self._checked(unquote, tok.val)
        self.expect(Tok.RIGHT_DELIM, context)
        self.add(name, self.named_body(context))

    def named_body(self, context: str) -> n.ListNode:
        """The list up to {{end}} of a define or block: its own variables ($ only) and outside any range."""
        outer_vars, outer_depth = self.vars, self.range_depth
        self.vars, self.range_depth = ["$"], 0
        try:
            body, end = self.item_list()
            if end.kind != "end":
                raise self.error(f"unexpected {{{{{end.kind}}}}} in {context}")
            return body
        finally:
            self.vars, self.range_depth = outer_vars, outer_depth

    def template_name(self, context: str) -> Token:
        tok = self.next_non_space()
        if tok.typ not in (Tok.STRING, Tok.RAW_STRING):
            raise self.unexpected(tok, context)
        return tok

    def template_clause(self) -> n.TemplateNode:
        context = "template clause"
        tok = self.template_name(context)
        pipe: n.PipeNode | None = None
        if self.next_non_space().typ is not Tok.RIGHT_DELIM:
            self.backup()
            pipe = self.pipeline(context, Tok.RIGHT_DELIM)  # its variables live on, as a plain action's do
        return n.TemplateNode(tok.pos, tok.line, self._checked(unquote, tok.val), pipe)

    def block_clause(self) -> n.TemplateNode:
        context = "block clause"
        tok = self.template_name(context)
        name = self._checked(unquote, tok.val)
        pipe = self.pipeline(context, Tok.RIGHT_DELIM)
        self.add(name, self.named_body(context))
        return n.TemplateNode(tok.pos, tok.line, name, pipe)

    def item_list(self) -> tuple[n.ListNode, _End]:
        start = self.peek_non_space().pos
        items: list[n.Node] = []
        while self.peek_non_space().typ is not Tok.EOF:
            item = self.text_or_action()
            if isinstance(item, _End):
                return n.ListNode(start, tuple(items)), item
            items.append(item)
        raise self.error("unexpected EOF")

    def text_or_action(self) -> n.Node | _End:
        tok = self.next_non_space()
        if tok.typ is Tok.TEXT:
            return n.TextNode(tok.pos, tok.val)
        if tok.typ is Tok.LEFT_DELIM:
            return self.action()
        raise self.unexpected(tok, "input")

    def action(self) -> n.Node | _End:
        tok = self.next_non_space()
        if tok.typ is Tok.TEMPLATE:
            return self.template_clause()
        if tok.typ is Tok.BLOCK:
            return self.block_clause()
        # {{define}} is taken at the top level only (see parse); anywhere else the pipeline refuses it
        # ("unexpected <define> in command"), as Go's does.
        if tok.typ is Tok.BREAK or tok.typ is Tok.CONTINUE:
            word = "break" if tok.typ is Tok.BREAK else "continue"
            after = self.next_non_space()
            if after.typ is not Tok.RIGHT_DELIM:
                raise self.unexpected(after, "{{" + word + "}}")
            if self.range_depth == 0:
                raise self.error("{{" + word + "}} outside {{range}}")
            cls = n.BreakNode if tok.typ is Tok.BREAK else n.ContinueNode
            return cls(tok.pos, tok.line)
        if tok.typ is Tok.ELSE:
            peek = self.peek_non_space()
            if peek.typ in (Tok.IF, Tok.WITH):
                return _End("else", peek)
            return _End("else", self.expect(Tok.RIGHT_DELIM, "else"))
        if tok.typ is Tok.END:
            return _End("end", self.expect(Tok.RIGHT_DELIM, "end"))
        if tok.typ in (Tok.IF, Tok.RANGE, Tok.WITH):
            return self.control(tok.val)
        self.backup()
        start = self.peek()
        # Variables declared by a plain action live until the enclosing {{end}}.
        return n.ActionNode(start.pos, start.line, self.pipeline("command", Tok.RIGHT_DELIM))

    def control(self, kind: str) -> n.BranchNode:
        mark = len(self.vars)
        try:
            pipe = self.pipeline(kind, Tok.RIGHT_DELIM)
            if kind == "range":
                self.range_depth += 1
            body, end = self.item_list()
            if kind == "range":
                self.range_depth -= 1
            else_list: n.ListNode | None = None
            if end.kind == "else":
                chained = self.peek_non_space()
                if kind in ("if", "with") and chained.typ is (Tok.IF if kind == "if" else Tok.WITH):
                    # {{else if x}} is {{else}}{{if x}}...{{end}}{{end}}: the inner control
                    # consumes the one {{end}}.
                    self.next_non_space()
                    else_list = n.ListNode(end.token.pos, (self.control(kind),))
                else:
                    else_list, end = self.item_list()
                    if end.kind != "end":
                        raise self.error("expected end; found {{else}}")
            return n.BranchNode(kind, pipe.pos, pipe.line, pipe, body, else_list)
        finally:
            del self.vars[mark:]

    # -- pipelines -------------------------------------------------------------------------
    def pipeline(self, context: str, end: Tok) -> n.PipeNode:
        first = self.peek_non_space()
        decl: list[n.VariableNode] = []
        is_assign = False
        while True:  # declarations: "$x :=", "$x =", "$i, $x :=" (range only)
            v = self.peek_non_space()
            if v.typ is not Tok.VARIABLE:
                break
            self.next_non_space()
            mark = self.i
            nxt = self.peek_non_space()
            if nxt.typ in (Tok.ASSIGN, Tok.DECLARE):
                is_assign = nxt.typ is Tok.ASSIGN
                self.next_non_space()
                decl.append(n.VariableNode(v.pos, (v.val,)))
                self.vars.append(v.val)
                break
            if nxt.typ is Tok.CHAR and nxt.val == ",":
                self.next_non_space()
                decl.append(n.VariableNode(v.pos, (v.val,)))
                self.vars.append(v.val)
                if context == "range" and len(decl) < 2:
                    if self.peek_non_space().typ in (Tok.VARIABLE, Tok.RIGHT_DELIM, Tok.RIGHT_PAREN):
                        continue
                    raise self.error("range can only initialize variables")
                raise self.error(f"too many declarations in {context}")
            # Not a declaration: "$x" is the first operand. Put it back.
            self.i = mark - 1
            break
        cmds: list[n.CommandNode] = []
        while True:
            tok = self.next_non_space()
            if tok.typ is end:
                if not cmds:
                    raise self.error(f"missing value for {context}")
                for stage, cmd in enumerate(cmds[1:], start=2):
                    if isinstance(cmd.args[0], (n.BoolNode, n.DotNode, n.NilNode, n.NumberNode, n.StringNode)):
                        raise self.error(f"non executable command in pipeline stage {stage}")
                return n.PipeNode(first.pos, first.line, is_assign, tuple(decl), tuple(cmds))
            if tok.typ in _OPERAND_START:
                self.backup()
                cmds.append(self.command())
                continue
            raise self.unexpected(tok, context)

    def command(self) -> n.CommandNode:
        start = self.peek_non_space().pos
        args: list[n.Node] = []
        while True:
            self.peek_non_space()
            operand = self.operand()
            if operand is not None:
                args.append(operand)
            tok = self.next()
            if tok.typ is Tok.SPACE:
                continue
            if tok.typ in (Tok.RIGHT_DELIM, Tok.RIGHT_PAREN):
                self.backup()
            elif tok.typ is not Tok.PIPE:
                raise self.unexpected(tok, "operand")
            break
        if not args:
            raise self.error("empty command")
        return n.CommandNode(start, tuple(args))

    def operand(self) -> n.Node | None:
        node = self.term()
        if node is None:
            return None
        if self.peek().typ is Tok.FIELD:
            pos = self.peek().pos
            fields: list[str] = []
            while self.peek().typ is Tok.FIELD:
                fields.append(self.next().val[1:])
            if isinstance(node, n.FieldNode):
                return n.FieldNode(node.pos, node.ident + tuple(fields))
            if isinstance(node, n.VariableNode):
                return n.VariableNode(node.pos, node.ident + tuple(fields))
            if isinstance(node, (n.BoolNode, n.StringNode, n.NumberNode, n.NilNode, n.DotNode)):
                raise self.error(f"unexpected . after term {str(node)!r}")
            return n.ChainNode(pos, node, tuple(fields))
        return node

    def term(self) -> n.Node | None:
        tok = self.next_non_space()
        typ = tok.typ
        if typ is Tok.IDENTIFIER:
            if tok.val == "call":
                raise self.unsupported(tok, "the call function")
            if tok.val not in self.funcs:
                raise self.error(f'function "{tok.val}" not defined')
            return n.IdentifierNode(tok.pos, tok.val)
        if typ is Tok.DOT:
            return n.DotNode(tok.pos)
        if typ is Tok.NIL:
            return n.NilNode(tok.pos)
        if typ is Tok.VARIABLE:
            if tok.val not in self.vars:
                raise self.error(f'undefined variable "{tok.val}"')
            return n.VariableNode(tok.pos, (tok.val,))
        if typ is Tok.FIELD:
            return n.FieldNode(tok.pos, (tok.val[1:],))
        if typ is Tok.BOOL:
            return n.BoolNode(tok.pos, tok.val == "true")
        if typ is Tok.COMPLEX:
            raise self.unsupported(tok, f"complex constant {tok.val}")
        if typ is Tok.CHAR_CONSTANT:
            return n.NumberNode(tok.pos, tok.val, self._checked(parse_char, tok.val))
        if typ is Tok.NUMBER:
            if tok.val.endswith("i") and not tok.val.lower().startswith(("0x", "+0x", "-0x")):
                raise self.unsupported(tok, f"imaginary constant {tok.val}")
            return n.NumberNode(tok.pos, tok.val, self._checked(parse_number, tok.val))
        if typ is Tok.LEFT_PAREN:
            return self.pipeline("parenthesized pipeline", Tok.RIGHT_PAREN)
        if typ in (Tok.STRING, Tok.RAW_STRING):
            return n.StringNode(tok.pos, tok.val, self._checked(unquote, tok.val))
        self.backup()
        return None

    def _checked(self, fn: Callable[[str], _T], text: str) -> _T:
        try:
            return fn(text)
        except ValueError as exc:
            raise self.error(str(exc)) from None


def parse(text: str, funcs: frozenset[str]) -> tuple[n.ListNode, dict[str, n.ListNode]]:
    """Parse template source into its main list and its named templates; raises TemplateError."""
    return Parser(text, funcs).parse()
