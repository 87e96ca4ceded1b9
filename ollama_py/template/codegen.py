"""A template's tree as one Python function (exec.py's closures, one level down).

exec.py turns a tree into nested closures: each node's code is a call, so printing `{{ .Content }}` is five
calls (the action, its pipeline, its command, the field, the print) and an agent's turn through Qwen's template
is ~13,000 calls a render. Here a tree that is rendered again becomes the source of one function, compiled once,
in which the common shapes are plain Python: text is appended, a field of a struct is read where the value is
one, `eq .Role "user"` is `==` on a string, `if`/`with`/`range` are Python's `if` and `for` (`{{break}}` and
`{{continue}}` Python's own), `and`/`or`/`not` short-circuit in place. Whatever else (a value of another type,
a call that may fail, a chain, a pipeline of several commands, a nested `{{template}}`) calls the closure
exec.py made for that node, so what a template author sees (values, errors and where they are reported,
limits) is exactly what the closures give; the tests render every template both ways and compare.

The variables stay where the closures keep them (`ex.vars`, innermost last) so that a closure called from
here finds them; but where each lives is known from the tree (Go's variables are lexically scoped), so they are
read and written by position. The output's size is counted in a local and given back to the executor around
any closure that prints. The clock is looked at every 256 range iterations (the closures: every 256 nodes);
between two looks the work is bounded by the template's own size, and templates calling templates look at it
on each call.

A tree too large to be worth compiling (compile() takes time in proportion), or one Python will not compile
(blocks nested past its limits), keeps its closures.
"""

from __future__ import annotations

import itertools
from typing import Any

from ollama_py.template import exec as x
from ollama_py.template import funcs
from ollama_py.template import nodes as n
from ollama_py.template.gofmt import format_value, sorted_items
from ollama_py.template.values import _PLAIN, GoStruct, is_true, unwrap

# A tree with more nodes keeps its closures: compiling costs ~2x parsing (~90 ms for 1,000 nodes here), and a
# request may bring a template of its own; Ollama's templates have 60-150.
MAX_NODES = 1500
_MAX_CHAIN = 8  # fields read in one chain (.A.B.C...) inline; longer chains through their closure
_MAX_OPERANDS = 16  # and/or operands inline


class _Unsupported(Exception):
    """The tree keeps its closures."""


# -- what the generated code calls ------------------------------------------------------------------------------
def _overflow(ex: x.Executor, node: n.Node) -> None:
    ex.node = node
    raise ex.error(f"the output passes the limit of {ex.limits.chars} characters")


def _iteration(ex: x.Executor, node: n.Node) -> None:
    """Past the iterations' limit (an error), or the 256th iteration since the clock was last looked at."""
    ex.node = node
    if ex.iterations > ex.limits.iterations:
        raise ex.error(f"range iterations pass the limit of {ex.limits.iterations} per render")
    ex.check_clock()


def _range_items(ex: x.Executor, node: n.BranchNode, value: Any, n_decl: int) -> Any:
    """What `range` walks over `value` as (key, element) pairs, or None when nothing (the else branch runs)."""
    data = unwrap(value)
    if isinstance(data, (list, tuple, bytes, bytearray)):
        return enumerate(data) if len(data) > 0 else None
    if isinstance(data, dict):
        return sorted_items(data) if len(data) > 0 else None
    if isinstance(data, int) and not isinstance(data, bool):
        ex.node = node
        if n_decl > 1:
            raise ex.error(f"can't use {data} to iterate over more than one variable")
        if data <= 0:
            return None
        if ex.iterations + data > ex.limits.iterations:
            raise ex.error(f"range over {data} passes the limit of {ex.limits.iterations} iterations per render")
        return zip(range(data), range(data))
    if data is not None:
        ex.node = node
        raise ex.error(f"range can't iterate over {format_value(value)}")
    return None


def _apply(ex: x.Executor, at: n.Node, name: str, fn: Any, what: str, *values: Any) -> Any:
    """A builtin whose count of arguments is right (the closures' ex.apply)."""
    try:
        result = fn(*values)
    except x._CALL_ERRORS as exc:
        ex.node = at
        raise ex.call_error(name, exc) from None
    if isinstance(result, str) and len(result) > ex.limits.chars:
        ex.node = at
        raise ex.error(f"{what} passes the limit of {ex.limits.chars} characters")
    return result


def _call_function(ex: x.Executor, at: n.Node, name: str, *values: Any) -> Any:
    """printf and the functions that build text, or a wrong count of arguments (ex.call_function)."""
    ex.node = at
    return ex.call_function(name, list(values))


def _compare(ex: x.Executor, at: n.Node, name: str, value: Any, constant: Any) -> Any:
    """eq/ne of a value with a string or integer constant of another type."""
    ex.node = at
    return ex.apply(name, funcs.BUILTINS[name][0], [value, constant], f"the result of {name}")


_RUNTIME = {"GS": GoStruct, "PLAIN": _PLAIN, "LENGTHS": frozenset({list, tuple, dict}), "MISSING": x.MISSING,
            "is_true": is_true, "_overflow": _overflow, "_iteration": _iteration, "_range_items": _range_items,
            "_apply": _apply, "_call_function": _call_function, "_compare": _compare}


# -- generating ----------------------------------------------------------------------------------------------------
def generate(root: n.ListNode) -> x.Walk | None:
    """The tree as one compiled function (ex, dot) -> None, or None where it keeps its closures."""
    if _larger_than(root, MAX_NODES):
        return None
    gen = _Gen()
    try:
        source = gen.function(root)
        code = compile(source, "<go template>", "exec")
    except (_Unsupported, SyntaxError, RecursionError, MemoryError, ValueError, OverflowError):
        return None
    namespace = {**_RUNTIME, **gen.names}
    exec(code, namespace)  # noqa: S102 (our own source, from a parsed tree: every value is a named constant)
    walk: x.Walk = namespace["_walk"]
    return walk


def _larger_than(root: n.ListNode, limit: int) -> bool:
    """Whether the tree has more than `limit` nodes (counted until it passes)."""
    stack: list[Any] = [root]
    count = 0
    while stack:
        node = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(node, n.ListNode):
            stack.extend(node.nodes)
        elif isinstance(node, n.BranchNode):
            stack.extend((node.pipe, node.list) if node.else_list is None else (node.pipe, node.list, node.else_list))
        elif isinstance(node, (n.ActionNode, n.TemplateNode)):
            if node.pipe is not None:
                stack.append(node.pipe)
        elif isinstance(node, n.PipeNode):
            stack.extend(node.cmds)
        elif isinstance(node, n.CommandNode):
            stack.extend(node.args)
        elif isinstance(node, n.ChainNode):
            stack.append(node.node)
    return False


def _declares(node: n.Node) -> bool:
    """Whether anything in a subtree pushes a variable (a := declaration)."""
    if isinstance(node, n.ListNode):
        return any(_declares(child) for child in node.nodes)
    if isinstance(node, n.ActionNode):
        return bool(node.pipe.decl) and not node.pipe.is_assign
    if isinstance(node, n.BranchNode):
        return ((bool(node.pipe.decl) and not node.pipe.is_assign) or _declares(node.list)
                or (node.else_list is not None and _declares(node.else_list)))
    return False


class _Gen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}  # the generated code's constants (nodes, text, closures) by name
        self._ids: dict[tuple[int, str], str] = {}
        self._temps = itertools.count()
        self.scope: list[str] = ["$"]  # the names in ex.vars at this point of the code
        self.loops = 0  # Python loops around this point (for {{break}} and {{continue}})

    # -- plumbing --
    def const(self, obj: Any, prefix: str = "k") -> str:
        key = (id(obj), prefix)
        name = self._ids.get(key)
        if name is None:
            name = f"{prefix}{len(self.names)}"
            self.names[name] = obj
            self._ids[key] = name
        return name

    def temp(self) -> str:
        return f"t{next(self._temps)}"

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def resolve(self, name: str) -> int:
        for i in range(len(self.scope) - 1, -1, -1):
            if self.scope[i] == name:
                return i
        raise _Unsupported  # (the parser refuses an undefined variable: the closures say so at run time)

    # -- statements --
    def function(self, root: n.ListNode) -> str:
        self.line(0, "def _walk(ex, d0):")
        self.line(1, "V = ex.vars")
        self.line(1, "O = ex.out.append")
        self.line(1, "LIM = ex.limits.chars")
        self.line(1, "ITL = ex.limits.iterations")
        self.line(1, "S = ex.size")
        self.block(root, 1, "d0")
        self.line(1, "ex.size = S")
        return "\n".join(self.lines) + "\n"

    def block(self, node: n.ListNode, indent: int, dot: str) -> None:
        before = len(self.lines)
        for child in node.nodes:
            self.statement(child, indent, dot)
        if len(self.lines) == before:
            self.line(indent, "pass")

    def closure_statement(self, node: n.Node, indent: int, dot: str) -> None:
        walk = self.const(x._walk_code(node), "w")
        self.line(indent, f"ex.size = S; {walk}(ex, {dot}); S = ex.size")

    def statement(self, node: n.Node, indent: int, dot: str) -> None:
        if isinstance(node, n.TextNode):
            if node.text:
                self.line(indent, f"S += {len(node.text)}")
                self.line(indent, f"if S > LIM: _overflow(ex, {self.const(node, 'n')})")
                self.line(indent, f"O({self.const(node.text)})")
        elif isinstance(node, n.ActionNode):
            self.action(node, indent, dot)
        elif isinstance(node, n.BranchNode):
            if node.kind == "range":
                self.range(node, indent, dot)
            else:
                self.branch(node, indent, dot)
        elif isinstance(node, (n.BreakNode, n.ContinueNode)) and self.loops:
            self.line(indent, "break" if isinstance(node, n.BreakNode) else "continue")
        else:  # {{template}}, and anything the closures report as an error
            self.closure_statement(node, indent, dot)

    def action(self, node: n.ActionNode, indent: int, dot: str) -> None:
        value = self.pipe(node.pipe, indent, dot)
        if node.pipe.decl:
            return
        t, where = self.temp(), self.const(node, "n")
        self.line(indent, f"{t} = {value}")
        self.line(indent, f"if type({t}) is not str: ex.node = {where}; {t} = ex.printable({t})")
        self.line(indent, f"S += len({t})")
        self.line(indent, f"if S > LIM: _overflow(ex, {where})")
        self.line(indent, f"O({t})")

    def truth(self, value: str) -> tuple[str, str]:
        """A condition with Go's truth of `value`, and the name the value is then held in."""
        if value.isidentifier():
            return f"({value} if type({value}) in PLAIN else is_true({value}))", value
        t = self.temp()
        return f"({t} if type({t} := {value}) in PLAIN else is_true({t}))", t

    def branch(self, node: n.BranchNode, indent: int, dot: str) -> None:
        """if and with (and their else-if / else-with chains, as elif): the variables declared in it last to
        {{end}}."""
        base = len(self.scope)
        pushes = _declares(node)  # (its else-if chain included)
        keyword = "if"
        current: n.BranchNode | None = node
        while current is not None:
            condition, value = self.truth(self.pipe(current.pipe, indent, dot))
            self.line(indent, f"{keyword} {condition}:")
            inner = len(self.scope)
            self.block(current.list, indent + 1, value if current.kind == "with" else dot)
            del self.scope[inner:]
            other = current.else_list
            current = None
            if other is None:
                break
            chained = other.nodes[0] if len(other.nodes) == 1 else None
            if isinstance(chained, n.BranchNode) and chained.kind != "range" and not chained.pipe.decl:
                keyword, current = "elif", chained
            else:
                self.line(indent, "else:")
                self.block(other, indent + 1, dot)
                del self.scope[inner:]
        del self.scope[base:]
        if pushes:
            self.line(indent, f"del V[{base}:]")

    def range(self, node: n.BranchNode, indent: int, dot: str) -> None:
        base = len(self.scope)
        decl = node.pipe.decl
        value = self.pipe(node.pipe, indent, dot)
        mark = len(self.scope)
        where = self.const(node, "n")
        t, items, key, elem = self.temp(), self.temp(), self.temp(), self.temp()
        self.line(indent, f"{t} = {value}")
        self.line(indent, f"{items} = enumerate({t}) if type({t}) is list and {t} else "
                          f"_range_items(ex, {where}, {t}, {len(decl)})")
        self.line(indent, f"if {items} is not None:")
        self.line(indent + 1, f"for {key}, {elem} in {items}:")
        body = indent + 2
        self.line(body, "ex.iterations += 1")
        self.line(body, f"if ex.iterations > ITL or not ex.iterations & 255: _iteration(ex, {where})")
        inside = _declares(node.list)
        if inside:
            self.line(body, f"del V[{mark}:]")
        if decl and node.pipe.is_assign:
            first = self.resolve(decl[0].ident[0])
            self.line(body, f"V[{first}][1] = {key if len(decl) > 1 else elem}")
            if len(decl) > 1:
                self.line(body, f"V[{self.resolve(decl[1].ident[0])}][1] = {elem}")
        elif decl:
            self.line(body, f"V[{mark - 1}][1] = {elem}")
            if len(decl) > 1:
                self.line(body, f"V[{mark - 2}][1] = {key}")
        self.loops += 1
        self.block(node.list, body, elem)
        self.loops -= 1
        del self.scope[mark:]
        if inside:
            self.line(indent + 1, f"del V[{mark}:]")
        if node.else_list is not None:
            self.line(indent, "else:")  # (outside this loop: a {{break}} here is an outer range's)
            self.block(node.else_list, indent + 1, dot)
            del self.scope[mark:]
        del self.scope[base:]
        if (decl and not node.pipe.is_assign) or (node.else_list is not None and _declares(node.else_list)):
            self.line(indent, f"del V[{base}:]")

    # -- expressions --
    def pipe(self, pipe: n.PipeNode, indent: int, dot: str) -> str:
        """The pipeline's value as an expression; its declarations (statements at `indent`) done."""
        value = self.pipe_value(pipe, dot)
        if not pipe.decl:
            return value
        t = self.temp()
        self.line(indent, f"{t} = {value}")
        if pipe.is_assign:
            for var in pipe.decl:
                self.line(indent, f"V[{self.resolve(var.ident[0])}][1] = {t}")
        else:
            for var in pipe.decl:
                self.line(indent, f"V.append([{self.const(var.ident[0])}, {t}])")
                self.scope.append(var.ident[0])
        return t

    def pipe_value(self, pipe: n.PipeNode, dot: str) -> str:
        value = self.command(pipe.cmds[0], dot)
        for cmd in pipe.cmds[1:]:  # the value piped into the next command: its closure takes it
            value = f"{self.const(x._command_code(cmd), 'c')}(ex, {dot}, {value})"
        return value

    def fields(self, receiver: str, ident: tuple[str, ...], fallback: str) -> str:
        """Fields read from `receiver` where each is a struct's (or a map's): anything else by `fallback`, which
        reads the whole chain again the closures' way (reading is free of effects)."""
        if len(ident) > _MAX_CHAIN:
            return fallback
        value = receiver
        for name in ident:
            key = self.const(name)
            if value.isidentifier():
                r = value
                test = f"type({r}) is GS"
            else:
                r = self.temp()
                test = f"type({r} := {value}) is GS"
            value = (f"({r}.fields[{key}] if {test} and {key} in {r}.fields "
                     f"else {r}.get({key}) if type({r}) is dict else {fallback})")
        return value

    def command(self, cmd: n.CommandNode, dot: str) -> str:
        """The first command of a pipeline (nothing piped into it)."""
        first, args = cmd.args[0], cmd.args
        fallback = f"{self.const(x._command_code(cmd), 'c')}(ex, {dot}, MISSING)"
        alone = len(args) == 1
        if isinstance(first, n.IdentifierNode):
            return self.call(first, args[1:], cmd, dot, fallback)
        if not alone:
            return fallback
        return self.term(first, dot, fallback, None, 0)

    def arg(self, arg: n.Node, func_name: str | None, position: int, dot: str) -> str:
        fallback = f"{self.const(x._arg_code(arg, func_name, position), 'a')}(ex, {dot})"
        if isinstance(arg, n.IdentifierNode):  # a function called with no arguments
            return fallback
        return self.term(arg, dot, fallback, func_name, position)

    def term(self, node: n.Node, dot: str, fallback: str, func_name: str | None, position: int) -> str:
        if isinstance(node, n.DotNode):
            return dot
        if isinstance(node, n.FieldNode):
            return self.fields(dot, node.ident, fallback)
        if isinstance(node, n.VariableNode):
            value = f"V[{self.resolve(node.ident[0])}][1]"
            return value if len(node.ident) == 1 else self.fields(value, node.ident[1:], fallback)
        if isinstance(node, n.PipeNode) and not node.decl:
            return self.pipe_value(node, dot)
        if isinstance(node, (n.BoolNode, n.NumberNode)):
            return self.const(node.value)
        if isinstance(node, n.StringNode):
            return self.const(node.text)
        return fallback  # nil (an error), a chain

    def call(self, ident: n.IdentifierNode, params: tuple[n.Node, ...], at: n.Node, dot: str,
             fallback: str) -> str:
        name = ident.name
        if name in funcs.SHORT_CIRCUIT:
            if not params or len(params) > _MAX_OPERANDS:
                return fallback
            operands = [self.arg(p, name, i, dot) for i, p in enumerate(params)]
            value = operands[-1]
            for operand in reversed(operands[:-1]):
                condition, held = self.truth(operand)
                value = f"({held} if {condition} else {value})" if name == "or" else \
                    f"({value} if {condition} else {held})"
            return value
        operands = [self.arg(p, name, i, dot) for i, p in enumerate(params)]
        where, label = self.const(at, "n"), self.const(name)
        constant = params[1] if len(params) == 2 else None
        known: Any = (constant.text if isinstance(constant, n.StringNode)
                      else constant.value if isinstance(constant, n.NumberNode) and type(constant.value) is int
                      else None)
        if name in ("eq", "ne") and known is not None:
            # `eq .Role "user"`, `eq (len $x) 1`: a value of the constant's own type compared at once
            t, k = self.temp(), self.const(known)
            op = "==" if name == "eq" else "!="
            slow = f"_compare(ex, {where}, {label}, {t}, {k})"
            kind = type(known).__name__  # str or int: the builtins' names in the generated code
            return f"(({t} {op} {k}) if type({t} := {operands[0]}) is {kind} else {slow})"
        fn, least, most = funcs.BUILTINS[name]
        count = len(operands)
        if name == "printf" or name in x._BUILDS_TEXT or (count < least if most is None else count != least):
            return f"_call_function(ex, {where}, {label}, {', '.join(operands)})"
        if name == "not":
            condition, _ = self.truth(operands[0])
            return f"(not {condition})"
        call = f"_apply(ex, {where}, {label}, {self.const(fn, 'f')}, {self.const(f'the result of {name}')}, "
        if name == "len":
            t = self.temp()
            return f"(len({t}) if type({t} := {operands[0]}) in LENGTHS else {call}{t}))"
        return call + ", ".join(operands) + ")"
