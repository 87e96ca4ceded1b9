"""Executes a parsed template against data, following Go's text/template/exec.go.

What a template author can observe is kept: variables declared inside if/with/range vanish at
{{end}} (and range-body variables at the end of each iteration) while `$x = v` assigns through to
the outer variable; maps range in sorted key order; a nil result prints `<no value>`; reading a
field of a struct that does not have it is an error, reading a missing map key yields nil
(Ollama runs templates with missingkey=zero over map[string]any).
Errors read like Go's: `template: :LINE:COL: executing "" at <NODE>: MESSAGE`.

`{{template "x" pipeline}}` runs the named template with the pipeline's value as both dot and `$` and none of
the caller's variables; errors inside it say `executing "x"`.

Go's text/template runs for as long as a template asks; templates here come from clients (a request's
`template`, a created model's TEMPLATE), so one render is bounded by `Limits`: range iterations, the size of
the output and of any string built on the way, how deep templates call templates, and wall time (checked between
nodes). Passing a bound is a
TemplateError, which the server answers with a 400.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ollama_py.errors import TemplateError
from ollama_py.template import funcs
from ollama_py.template import nodes as n
from ollama_py.template.gofmt import OutputTooLong, format_value, go_quote, sorted_items
from ollama_py.template.values import GoNamed, GoStruct, go_type_name, is_true, unwrap


@dataclass(frozen=True, slots=True)
class Limits:
    """What one render may spend (Go has no such bounds; a server rendering clients' templates needs them)."""

    iterations: int = 1_000_000  # range iterations, all the render's ranges together
    chars: int = 64 * 1024 * 1024  # characters of output, and of any one string built on the way
    seconds: float = 10.0  # wall time
    # Templates calling templates, nested (Go allows 100000). Each level takes a few Python frames, so this stays
    # well under the interpreter's recursion limit; a recursive template that goes deeper is refused here.
    depth: int = 100

    def describe_seconds(self) -> str:
        return f"{self.seconds:g} s"


DEFAULT_LIMITS = Limits()
_CLOCK_EVERY = 256  # nodes walked between two looks at the clock


class _Missing:
    """No value passed down the pipeline (Go's missingVal)."""


MISSING: Any = _Missing()


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class Executor:
    def __init__(
        self, source: str, data: Any, limits: Limits = DEFAULT_LIMITS, named: Mapping[str, n.ListNode] | None = None
    ) -> None:
        self.source = source
        self.named: Mapping[str, n.ListNode] = named or {}
        self.root: n.ListNode | None = None
        self.name = ""  # the template being executed
        self.depth = 0
        self.vars: list[list[Any]] = [["$", data]]  # [name, value] pairs, innermost last
        self.out: list[str] = []
        self.node: Any = None
        self.limits = limits
        self.size = 0  # characters in self.out
        self.iterations = 0
        self.steps = 0
        self.deadline = time.monotonic() + limits.seconds

    # -- errors --------------------------------------------------------------------------------
    def error(self, msg: str) -> TemplateError:
        node = self.node
        if node is None:
            return TemplateError(f'template: : executing "" : {msg}')
        pos = getattr(node, "pos", 0)
        line = self.source.count("\n", 0, pos) + 1
        col = pos - (self.source.rfind("\n", 0, pos) + 1)
        where = str(node)
        if len(where) > 20:
            where = where[:20] + "..."
        return TemplateError(f"template: :{line}:{col}: executing {go_quote(self.name)} at <{where}>: {msg}")

    # -- variables -----------------------------------------------------------------------------
    def push(self, name: str, value: Any) -> None:
        self.vars.append([name, value])

    def pop(self, mark: int) -> None:
        del self.vars[mark:]

    def set_var(self, name: str, value: Any) -> None:
        for entry in reversed(self.vars):
            if entry[0] == name:
                entry[1] = value
                return
        raise self.error(f"undefined variable: {name}")

    def set_top_var(self, n_from_top: int, value: Any) -> None:
        self.vars[-n_from_top][1] = value

    def var_value(self, name: str) -> Any:
        for entry in reversed(self.vars):
            if entry[0] == name:
                return entry[1]
        raise self.error(f"undefined variable: {name}")

    # -- bounds --------------------------------------------------------------------------------
    def emit(self, text: str) -> None:
        self.size += len(text)
        if self.size > self.limits.chars:
            raise self.error(f"the output passes the limit of {self.limits.chars} characters")
        self.out.append(text)

    def check_size(self, value: Any, what: str) -> Any:
        if isinstance(value, str) and len(value) > self.limits.chars:
            raise self.error(f"{what} passes the limit of {self.limits.chars} characters")
        return value

    def check_clock(self) -> None:
        if time.monotonic() > self.deadline:
            raise self.error(f"rendering takes longer than the limit of {self.limits.describe_seconds()}")

    def count_iterations(self, count: int) -> None:
        self.iterations += count
        if self.iterations > self.limits.iterations:
            raise self.error(f"range iterations pass the limit of {self.limits.iterations} per render")

    # -- walking -------------------------------------------------------------------------------
    def run(self, root: n.ListNode) -> str:
        data = self.vars[0][1]
        self.root = root
        self.walk(data, root)
        return "".join(self.out)

    def walk(self, dot: Any, node: n.Node) -> None:
        self.node = node
        self.steps += 1
        if self.steps % _CLOCK_EVERY == 0:
            self.check_clock()
        if isinstance(node, n.TextNode):
            self.emit(node.text)
        elif isinstance(node, n.ActionNode):
            value = self.eval_pipeline(dot, node.pipe)
            if not node.pipe.decl:
                self.node = node
                self.emit(self.printable(value))
        elif isinstance(node, n.ListNode):
            for child in node.nodes:
                self.walk(dot, child)
        elif isinstance(node, n.BranchNode):
            if node.kind == "range":
                self.walk_range(dot, node)
            else:
                self.walk_if_or_with(dot, node)
        elif isinstance(node, n.TemplateNode):
            self.walk_template(dot, node)
        elif isinstance(node, n.BreakNode):
            raise _Break
        elif isinstance(node, n.ContinueNode):
            raise _Continue
        else:
            raise self.error(f"unknown node: {node}")

    def printable(self, value: Any) -> str:
        if value is None:
            return "<no value>"
        try:
            return format_value(value, action=True)
        except TemplateError as exc:
            raise self.error(str(exc)) from None

    def walk_if_or_with(self, dot: Any, node: n.BranchNode) -> None:
        mark = len(self.vars)
        try:
            value = self.eval_pipeline(dot, node.pipe)
            if is_true(value):
                self.walk(value if node.kind == "with" else dot, node.list)
            elif node.else_list is not None:
                self.walk(dot, node.else_list)
        finally:
            self.pop(mark)

    def walk_template(self, dot: Any, node: n.TemplateNode) -> None:
        # "" is the template being run (Go's set maps "" to the main tree, whatever Ollama appended to it).
        body = self.root if node.name == "" else self.named.get(node.name)
        if body is None:
            raise self.error(f"template {go_quote(node.name)} not defined")
        if self.depth >= self.limits.depth:
            raise self.error(f"exceeded maximum template depth ({self.limits.depth})")
        value = None if node.pipe is None else self.eval_pipeline(dot, node.pipe)
        outer = self.vars, self.name
        self.vars, self.name = [["$", value]], node.name
        self.depth += 1
        try:
            self.walk(value, body)
        finally:
            self.vars, self.name = outer
            self.depth -= 1

    def walk_range(self, dot: Any, node: n.BranchNode) -> None:
        outer = len(self.vars)
        try:
            value = self.eval_pipeline(dot, node.pipe)
            mark = len(self.vars)
            decl = node.pipe.decl

            def one(index: Any, elem: Any) -> None:
                self.node = node
                self.count_iterations(1)
                if decl:
                    if node.pipe.is_assign:
                        self.set_var(decl[0].ident[0], index if len(decl) > 1 else elem)
                    else:
                        self.set_top_var(1, elem)
                if len(decl) > 1:
                    if node.pipe.is_assign:
                        self.set_var(decl[1].ident[0], elem)
                    else:
                        self.set_top_var(2, index)
                try:
                    self.walk(elem, node.list)
                except _Continue:
                    pass
                finally:
                    self.pop(mark)

            data = unwrap(value)
            try:
                if isinstance(data, (list, tuple, bytes, bytearray)):
                    if len(data) > 0:
                        for i, elem in enumerate(data):
                            one(i, elem)
                        return
                elif isinstance(data, dict):
                    if len(data) > 0:
                        for key, elem in sorted_items(data):
                            one(key, elem)
                        return
                elif isinstance(data, int) and not isinstance(data, bool):
                    self.node = node
                    if len(decl) > 1:
                        raise self.error(f"can't use {data} to iterate over more than one variable")
                    if data > 0:
                        if self.iterations + data > self.limits.iterations:
                            raise self.error(f"range over {data} passes the limit of {self.limits.iterations}"
                                             " iterations per render")
                        for i in range(data):
                            one(i, i)
                        return
                elif data is not None:
                    self.node = node
                    raise self.error(f"range can't iterate over {format_value(value)}")
            except _Break:
                return
            if node.else_list is not None:
                self.walk(dot, node.else_list)
        finally:
            self.pop(outer)

    # -- evaluation ----------------------------------------------------------------------------
    def eval_pipeline(self, dot: Any, pipe: n.PipeNode) -> Any:
        self.node = pipe
        value = MISSING
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
        for var in pipe.decl:
            if pipe.is_assign:
                self.set_var(var.ident[0], value)
            else:
                self.push(var.ident[0], value)
        return value

    def not_a_function(self, args: tuple[n.Node, ...], final: Any) -> None:
        if len(args) > 1 or final is not MISSING:
            raise self.error(f"can't give argument to non-function {args[0]}")

    def eval_command(self, dot: Any, cmd: n.CommandNode, final: Any) -> Any:
        first = cmd.args[0]
        self.node = first
        if isinstance(first, n.FieldNode):
            return self.eval_field_chain(dot, dot, first, first.ident, cmd.args, final)
        if isinstance(first, n.ChainNode):
            return self.eval_chain(dot, first, cmd.args, final)
        if isinstance(first, n.IdentifierNode):
            return self.eval_function(dot, first, cmd.args, final, cmd)
        if isinstance(first, n.PipeNode):
            self.not_a_function(cmd.args, final)
            return self.eval_pipeline(dot, first)
        if isinstance(first, n.VariableNode):
            return self.eval_variable(dot, first, cmd.args, final)
        self.not_a_function(cmd.args, final)
        if isinstance(first, n.BoolNode):
            return first.value
        if isinstance(first, n.DotNode):
            return dot
        if isinstance(first, n.NilNode):
            raise self.error("nil is not a command")
        if isinstance(first, n.NumberNode):
            return first.value
        if isinstance(first, n.StringNode):
            return first.text
        raise self.error(f"can't evaluate command {first}")

    def eval_variable(self, dot: Any, var: n.VariableNode, args: tuple[n.Node, ...], final: Any) -> Any:
        value = self.var_value(var.ident[0])
        if len(var.ident) == 1:
            self.not_a_function(args, final)
            return value
        return self.eval_field_chain(dot, value, var, var.ident[1:], args, final)

    def eval_chain(self, dot: Any, chain: n.ChainNode, args: tuple[n.Node, ...], final: Any) -> Any:
        if isinstance(chain.node, n.NilNode):
            raise self.error(f"indirection through explicit nil in {chain}")
        receiver = self.eval_arg(dot, chain.node, None)
        return self.eval_field_chain(dot, receiver, chain, chain.field, args, final)

    def eval_field_chain(
        self, dot: Any, receiver: Any, node: n.Node, ident: tuple[str, ...], args: tuple[n.Node, ...], final: Any
    ) -> Any:
        if receiver is None:
            # Go: a nil data value (or a variable holding a pipeline's nil) reads as nil.
            return None
        for name in ident[:-1]:
            receiver = self.eval_field(name, receiver, (), MISSING)
        return self.eval_field(ident[-1], receiver, args, final)

    def eval_field(self, name: str, receiver: Any, args: tuple[n.Node, ...], final: Any) -> Any:
        has_args = len(args) > 1 or final is not MISSING
        if receiver is None:
            raise self.error(f"nil pointer evaluating interface {{}}.{name}")
        if isinstance(receiver, GoStruct):
            if name in receiver.fields:
                if has_args:
                    raise self.error(f"{name} has arguments but cannot be invoked as function")
                return receiver.fields[name]
        elif isinstance(receiver, dict) or (isinstance(receiver, GoNamed) and receiver.kind == "map"):
            if has_args:
                raise self.error(f"{name} is not a method but has arguments")
            data = unwrap(receiver)
            if name in data:
                return data[name]
            if isinstance(receiver, GoNamed) and receiver.elem_zero is not None:
                return receiver.elem_zero()
            return None
        raise self.error(f"can't evaluate field {name} in type {go_type_name(receiver)}")

    def eval_function(
        self, dot: Any, ident: n.IdentifierNode, args: tuple[n.Node, ...], final: Any, where: n.Node | None = None
    ) -> Any:
        name = ident.name
        params = args[1:]
        if name in funcs.SHORT_CIRCUIT:
            if not params and final is MISSING:
                raise self.error(f"wrong number of args for {name}: want at least 1 got 0")
            value: Any = None
            for arg in params:
                value = self.eval_arg(dot, arg, name)
                if is_true(value) == (name == "or"):
                    return value
            if final is not MISSING:
                value = final
            return value
        values = [self.eval_arg(dot, arg, name, position) for position, arg in enumerate(params)]
        if final is not MISSING:
            values.append(final)
        self.node = where or ident  # Go reports a call's errors at the whole command
        if name in _BUILDS_TEXT and _rough_size(values, self.limits.chars) > self.limits.chars:
            raise self.error(f"the arguments of {name} pass the limit of {self.limits.chars} characters")
        try:
            result = funcs.call(name, values, self.limits.chars)
        except OutputTooLong as exc:
            raise self.error(f"error calling {name}: {exc}") from None
        except funcs.ArgError as exc:
            raise self.error(str(exc)) from None
        except funcs.FuncError as exc:
            raise self.error(f"error calling {name}: {exc}") from None
        except TemplateError as exc:
            raise self.error(f"error calling {name}: {exc}") from None
        return self.check_size(result, f"the result of {name}")

    def eval_arg(self, dot: Any, arg: n.Node, func_name: str | None, position: int = 0) -> Any:
        self.node = arg
        if isinstance(arg, n.DotNode):
            return dot
        if isinstance(arg, n.NilNode):
            if func_name in funcs.VALUE_PARAMS:
                raise self.error("cannot assign nil to reflect.Value")
            if func_name == "printf" and position == 0:
                raise self.error("cannot assign nil to string")
            return None
        if isinstance(arg, n.FieldNode):
            return self.eval_field_chain(dot, dot, arg, arg.ident, (arg,), MISSING)
        if isinstance(arg, n.VariableNode):
            return self.eval_variable(dot, arg, (arg,), MISSING)
        if isinstance(arg, n.PipeNode):
            return self.eval_pipeline(dot, arg)
        if isinstance(arg, n.IdentifierNode):
            return self.eval_function(dot, arg, (arg,), MISSING)
        if isinstance(arg, n.ChainNode):
            return self.eval_chain(dot, arg, (arg,), MISSING)
        if isinstance(arg, n.BoolNode):
            return arg.value
        if isinstance(arg, n.NumberNode):
            return arg.value
        if isinstance(arg, n.StringNode):
            return arg.text
        raise self.error(f"can't handle {arg} as an argument")


# Functions whose result grows with their arguments' text (printf bounds its own result as it builds it).
_BUILDS_TEXT = frozenset({"print", "println", "html", "js", "urlquery", "json"})


def _rough_size(values: list[Any], limit: int) -> int:
    """About how many characters printing `values` takes: the strings' lengths and one per other item,
    counted only until the count passes `limit`."""
    total = 0
    stack = list(values)
    while stack and total <= limit:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
            total += 1
        elif isinstance(v, Mapping):
            stack.extend(v.keys())
            stack.extend(v.values())
            total += 1
        elif isinstance(v, (GoStruct, GoNamed)):
            stack.append(v.fields if isinstance(v, GoStruct) else v.contents())
            total += 1
        else:
            total += 1
    return total


def execute(
    source: str,
    root: n.ListNode,
    data: Any,
    limits: Limits = DEFAULT_LIMITS,
    named: Mapping[str, n.ListNode] | None = None,
) -> str:
    try:
        return Executor(source, data, limits, named).run(root)
    except RecursionError:
        raise TemplateError("template: : executing \"\": nesting too deep") from None
