"""The parse tree of a Go template, mirroring Go's text/template/parse node types.

Nodes are immutable so a parsed template can be cached and shared; Ollama's tree surgery (appending
`{{ .Response }}`, cutting everything after it for the legacy path) builds new trees with
`dataclasses.replace`. `str(node)` gives Go's String() of the node, used in error messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from ollama_py.template.gofmt import go_quote


@dataclass(frozen=True, slots=True)
class TextNode:
    pos: int
    text: str

    def __str__(self) -> str:
        return repr(self.text)


@dataclass(frozen=True, slots=True)
class DotNode:
    pos: int

    def __str__(self) -> str:
        return "."


@dataclass(frozen=True, slots=True)
class NilNode:
    pos: int

    def __str__(self) -> str:
        return "nil"


@dataclass(frozen=True, slots=True)
class BoolNode:
    pos: int
    value: bool

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass(frozen=True, slots=True)
class NumberNode:
    pos: int
    text: str
    value: int | float  # Go's "ideal constant": int unless the text is float-shaped

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class StringNode:
    pos: int
    quoted: str
    text: str

    def __str__(self) -> str:
        return self.quoted


@dataclass(frozen=True, slots=True)
class FieldNode:
    pos: int
    ident: tuple[str, ...]  # .A.B -> ("A", "B")

    def __str__(self) -> str:
        return "".join("." + i for i in self.ident)


@dataclass(frozen=True, slots=True)
class VariableNode:
    pos: int
    ident: tuple[str, ...]  # $x.A -> ("$x", "A")

    def __str__(self) -> str:
        return ".".join(self.ident)


@dataclass(frozen=True, slots=True)
class IdentifierNode:
    pos: int
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class ChainNode:
    pos: int
    node: Node  # a parenthesised pipeline (or other term) followed by fields
    field: tuple[str, ...]

    def __str__(self) -> str:
        inner = f"({self.node})" if isinstance(self.node, PipeNode) else str(self.node)
        return inner + "".join("." + f for f in self.field)


@dataclass(frozen=True, slots=True)
class CommandNode:
    pos: int
    args: tuple[Node, ...]

    def __str__(self) -> str:
        return " ".join(f"({a})" if isinstance(a, PipeNode) else str(a) for a in self.args)


@dataclass(frozen=True, slots=True)
class PipeNode:
    pos: int
    line: int
    is_assign: bool
    decl: tuple[VariableNode, ...]
    cmds: tuple[CommandNode, ...]

    def __str__(self) -> str:
        head = ""
        if self.decl:
            head = ", ".join(str(d) for d in self.decl) + (" = " if self.is_assign else " := ")
        return head + " | ".join(str(c) for c in self.cmds)


@dataclass(frozen=True, slots=True)
class ActionNode:
    pos: int
    line: int
    pipe: PipeNode

    def __str__(self) -> str:
        return "{{" + str(self.pipe) + "}}"


@dataclass(frozen=True, slots=True)
class ListNode:
    pos: int
    nodes: tuple[Node, ...]

    def __str__(self) -> str:
        return "".join(str(n) for n in self.nodes)


@dataclass(frozen=True, slots=True)
class BranchNode:
    """The shape shared by if, range and with; `kind` says which."""

    kind: str  # "if" | "range" | "with"
    pos: int
    line: int
    pipe: PipeNode
    list: ListNode
    else_list: ListNode | None

    def __str__(self) -> str:
        s = "{{" + self.kind + " " + str(self.pipe) + "}}" + str(self.list)
        if self.else_list is not None:
            s += "{{else}}" + str(self.else_list)
        return s + "{{end}}"


@dataclass(frozen=True, slots=True)
class BreakNode:
    pos: int
    line: int

    def __str__(self) -> str:
        return "{{break}}"


@dataclass(frozen=True, slots=True)
class ContinueNode:
    pos: int
    line: int

    def __str__(self) -> str:
        return "{{continue}}"


@dataclass(frozen=True, slots=True)
class TemplateNode:
    """{{template "name" pipeline}}; a {{block}} parses to a named template plus one of these. `pipe` is None
    for {{template "name"}}, which runs the template with nil dot. `pos` is the name's position, as in Go."""

    pos: int
    line: int
    name: str
    pipe: PipeNode | None

    def __str__(self) -> str:
        pipe = "" if self.pipe is None else " " + str(self.pipe)
        return "{{template " + go_quote(self.name) + pipe + "}}"


Node: TypeAlias = (
    TextNode | DotNode | NilNode | BoolNode | NumberNode | StringNode | FieldNode | VariableNode | IdentifierNode |
    ChainNode | CommandNode | PipeNode | ActionNode | ListNode | BranchNode | BreakNode | ContinueNode | TemplateNode
)


# Go's unicode.IsSpace, which bytes.TrimSpace uses (str.strip() also takes U+001C..U+001F).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
    "\u2028\u2029\u202f\u205f\u3000"


def is_empty_tree(node: Node) -> bool:
    """Go's parse.IsEmptyTree: nothing but white space. An empty {{define}} never replaces a template that has
    a body, and a body may replace an empty one."""
    if isinstance(node, ListNode):
        return all(is_empty_tree(child) for child in node.nodes)
    if isinstance(node, TextNode):
        return not node.text.strip(_GO_SPACE)
    return False
