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

codegen.py turns a tree into one Python function with the behaviour of the closures below (calling them for every
shape it does not write out itself); the closures run a tree it does not take, and renders on an event loop's
thread until a render elsewhere has compiled the tree.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

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

    # -- running -------------------------------------------------------------------------------
    def run(self, root: n.ListNode) -> str:
        data = self.vars[0][1]
        self.root = root
        compiled(root)(self, data)
        return "".join(self.out)

    def printable(self, value: Any) -> str:
        if type(value) is str:  # most actions print a message's text
            return value
        if value is None:
            return "<no value>"
        try:
            return format_value(value, action=True)
        except TemplateError as exc:
            raise self.error(str(exc)) from None

    # -- evaluation (what the compiled code calls) ----------------------------------------------
    def not_a_function(self, args: tuple[n.Node, ...], final: Any) -> None:
        if len(args) > 1 or final is not MISSING:
            raise self.error(f"can't give argument to non-function {args[0]}")

    def eval_variable(self, dot: Any, var: n.VariableNode, args: tuple[n.Node, ...], final: Any) -> Any:
        value = self.var_value(var.ident[0])
        if len(var.ident) == 1:
            self.not_a_function(args, final)
            return value
        return self.eval_field_chain(dot, value, var, var.ident[1:], args, final)

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

    def call_function(self, name: str, values: list[Any]) -> Any:
        """A builtin (not and/or) on its evaluated arguments; self.node is the call, for its errors."""
        if name in _BUILDS_TEXT and _rough_size(values, self.limits.chars) > self.limits.chars:
            raise self.error(f"the arguments of {name} pass the limit of {self.limits.chars} characters")
        try:
            result = funcs.call(name, values, self.limits.chars)
        except _CALL_ERRORS as exc:
            raise self.call_error(name, exc) from None
        return self.check_size(result, f"the result of {name}")

    def apply(self, name: str, fn: Callable[..., Any], values: list[Any], what: str) -> Any:
        """fn(*values) for a call of `name` whose arguments are known to fit, its errors and result's size as
        call_function has them."""
        try:
            result = fn(*values)
        except _CALL_ERRORS as exc:
            raise self.call_error(name, exc) from None
        return self.check_size(result, what)

    def call_error(self, name: str, exc: Exception) -> TemplateError:
        """What a failed call of `name` reads as (Go reports a wrong call itself without "error calling")."""
        if isinstance(exc, funcs.ArgError):
            return self.error(str(exc))
        return self.error(f"error calling {name}: {exc}")


# Functions whose result grows with their arguments' text (printf bounds its own result as it builds it).
_BUILDS_TEXT = frozenset({"print", "println", "html", "js", "urlquery", "json"})
_CALL_ERRORS = (OutputTooLong, funcs.ArgError, funcs.FuncError, TemplateError)


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


# -- compiling --------------------------------------------------------------------------------------------------
# A tree is turned once into nested closures, each knowing its node's kind, its children's code and its constants,
# so that a render runs them instead of asking each node what it is: an agent's hundred-message chat through
# Qwen's template was ~42,000 isinstance calls a render (2.8 ms of 5). The closures do what Go's exec.go does, in
# its order, and set `ex.node` where its errors are reported.
Walk: TypeAlias = Callable[[Executor, Any], None]  # (executor, dot): writes output
Eval: TypeAlias = Callable[[Executor, Any], Any]  # (executor, dot) -> value
Command: TypeAlias = Callable[[Executor, Any, Any], Any]  # (executor, dot, the previous command's value) -> value

# id(tree) -> (tree, its code, whether that is final): trees are frozen and shared
_CODE: dict[int, tuple[n.ListNode, Walk, bool]] = {}
_CODE_KEPT = 512
# Whether trees run generated code (codegen.py): None, where no event loop runs on the thread (compiling a tree
# takes ~5 ms, longer than most renders: a render on the loop runs the closures until one in a thread has
# compiled it); True or False: always or never (the tests run every template both ways).
_GENERATE: bool | None = None


def generate_code(mode: bool | None) -> None:
    """Set _GENERATE; forgets the code kept."""
    global _GENERATE
    _GENERATE = mode
    _CODE.clear()


def compiled(root: n.ListNode) -> Walk:
    """The code of a template's tree (or of a named template's): one generated function where the tree allows
    and the thread may compile it, else the closures below. Kept."""
    got = _CODE.get(id(root))
    may = _GENERATE if _GENERATE is not None else asyncio.events._get_running_loop() is None
    if got is not None and got[0] is root:
        if got[2] or not may:
            return got[1]
        code = _generated(root) or got[1]
    else:
        code = (may and _generated(root)) or _walk_code(root)
        if len(_CODE) >= _CODE_KEPT:
            _CODE.clear()
    _CODE[id(root)] = (root, code, may or _GENERATE is False)
    return code


def _generated(root: n.ListNode) -> Walk | None:
    from ollama_py.template import codegen  # (it builds on this module)

    return codegen.generate(root)


def _walk_code(node: n.Node) -> Walk:
    if isinstance(node, n.TextNode):
        return _text_code(node)
    if isinstance(node, n.ActionNode):
        return _action_code(node)
    if isinstance(node, n.ListNode):
        return _list_code(node)
    if isinstance(node, n.BranchNode):
        return _range_code(node) if node.kind == "range" else _if_code(node)
    if isinstance(node, n.TemplateNode):
        return _template_code(node)
    stop: type[Exception] | None = (_Break if isinstance(node, n.BreakNode)
                                    else _Continue if isinstance(node, n.ContinueNode) else None)

    def walk(ex: Executor, dot: Any) -> None:
        _enter(ex, node)
        if stop is None:
            raise ex.error(f"unknown node: {node}")
        raise stop

    return walk


def _enter(ex: Executor, node: n.Node) -> None:
    """Where the walk is (errors name it); the clock looked at every _CLOCK_EVERY nodes."""
    ex.node = node
    ex.steps += 1
    if ex.steps % _CLOCK_EVERY == 0:
        ex.check_clock()


def _text_code(node: n.TextNode) -> Walk:
    text = node.text

    def walk(ex: Executor, dot: Any) -> None:
        ex.node = node
        ex.steps += 1
        if ex.steps % _CLOCK_EVERY == 0:
            ex.check_clock()
        ex.emit(text)

    return walk


def _action_code(node: n.ActionNode) -> Walk:
    pipe = _pipe_code(node.pipe)
    prints = not node.pipe.decl

    def walk(ex: Executor, dot: Any) -> None:
        _enter(ex, node)
        value = pipe(ex, dot)
        if prints:
            ex.node = node
            ex.emit(ex.printable(value))

    return walk


def _list_code(node: n.ListNode) -> Walk:
    children = tuple(_walk_code(child) for child in node.nodes)

    def walk(ex: Executor, dot: Any) -> None:
        ex.node = node
        ex.steps += 1
        if ex.steps % _CLOCK_EVERY == 0:
            ex.check_clock()
        for child in children:
            child(ex, dot)

    return walk


def _if_code(node: n.BranchNode) -> Walk:
    """if and with: the pipeline's variables last until {{end}}."""
    pipe = _pipe_code(node.pipe)
    body = _list_code(node.list)
    other = _list_code(node.else_list) if node.else_list is not None else None
    is_with = node.kind == "with"

    def walk(ex: Executor, dot: Any) -> None:
        _enter(ex, node)
        mark = len(ex.vars)
        try:
            value = pipe(ex, dot)
            if is_true(value):
                body(ex, value if is_with else dot)
            elif other is not None:
                other(ex, dot)
        finally:
            del ex.vars[mark:]

    return walk


def _range_code(node: n.BranchNode) -> Walk:
    pipe = _pipe_code(node.pipe)
    body = _list_code(node.list)
    other = _list_code(node.else_list) if node.else_list is not None else None
    decl = node.pipe.decl
    assign = node.pipe.is_assign
    names = tuple(d.ident[0] for d in decl)

    def walk(ex: Executor, dot: Any) -> None:
        _enter(ex, node)
        outer = len(ex.vars)
        try:
            value = pipe(ex, dot)
            mark = len(ex.vars)

            def one(index: Any, elem: Any) -> None:
                ex.node = node
                ex.count_iterations(1)
                if names:
                    if assign:
                        ex.set_var(names[0], index if len(names) > 1 else elem)
                    else:
                        ex.set_top_var(1, elem)
                if len(names) > 1:
                    if assign:
                        ex.set_var(names[1], elem)
                    else:
                        ex.set_top_var(2, index)
                try:
                    body(ex, elem)
                except _Continue:
                    pass
                finally:
                    del ex.vars[mark:]

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
                    ex.node = node
                    if len(decl) > 1:
                        raise ex.error(f"can't use {data} to iterate over more than one variable")
                    if data > 0:
                        if ex.iterations + data > ex.limits.iterations:
                            raise ex.error(f"range over {data} passes the limit of {ex.limits.iterations}"
                                           " iterations per render")
                        for i in range(data):
                            one(i, i)
                        return
                elif data is not None:
                    ex.node = node
                    raise ex.error(f"range can't iterate over {format_value(value)}")
            except _Break:
                return
            if other is not None:
                other(ex, dot)
        finally:
            del ex.vars[outer:]

    return walk


def _template_code(node: n.TemplateNode) -> Walk:
    """{{template "x" pipeline}}: "" is the template being run (Go's set maps "" to the main tree, whatever Ollama
    appended to it)."""
    name = node.name
    pipe = _pipe_code(node.pipe) if node.pipe is not None else None

    def walk(ex: Executor, dot: Any) -> None:
        _enter(ex, node)
        tree = ex.root if name == "" else ex.named.get(name)
        if tree is None:
            raise ex.error(f"template {go_quote(name)} not defined")
        if ex.depth >= ex.limits.depth:
            raise ex.error(f"exceeded maximum template depth ({ex.limits.depth})")
        value = None if pipe is None else pipe(ex, dot)
        outer = ex.vars, ex.name
        ex.vars, ex.name = [["$", value]], name
        ex.depth += 1
        try:
            compiled(tree)(ex, value)
        finally:
            ex.vars, ex.name = outer
            ex.depth -= 1

    return walk


def _pipe_code(pipe: n.PipeNode) -> Eval:
    cmds = tuple(_command_code(cmd) for cmd in pipe.cmds)
    names = tuple(var.ident[0] for var in pipe.decl)
    assign = pipe.is_assign
    if len(cmds) == 1 and not names:  # most pipelines: one command, nothing declared
        only = cmds[0]

        def one(ex: Executor, dot: Any) -> Any:
            ex.node = pipe
            return only(ex, dot, MISSING)

        return one

    def run(ex: Executor, dot: Any) -> Any:
        ex.node = pipe
        value = MISSING
        for cmd in cmds:
            value = cmd(ex, dot, value)
        for name in names:
            if assign:
                ex.set_var(name, value)
            else:
                ex.push(name, value)
        return value

    return run


def _command_code(cmd: n.CommandNode) -> Command:
    first, args = cmd.args[0], cmd.args
    if isinstance(first, n.FieldNode):
        ident = first.ident
        name = ident[0] if len(ident) == 1 and len(args) == 1 else None  # .Name alone: read directly

        def field(ex: Executor, dot: Any, final: Any) -> Any:
            ex.node = first
            if name is not None and final is MISSING and type(dot) is GoStruct and name in dot.fields:
                return dot.fields[name]
            return ex.eval_field_chain(dot, dot, first, ident, args, final)

        return field
    if isinstance(first, n.ChainNode):
        chain = _chain_code(first, args)
        return lambda ex, dot, final: chain(ex, dot, final, first)
    if isinstance(first, n.IdentifierNode):
        return _function_code(first, args, cmd)
    if isinstance(first, n.VariableNode):

        def variable(ex: Executor, dot: Any, final: Any) -> Any:
            ex.node = first
            return ex.eval_variable(dot, first, args, final)

        return variable
    inner = _pipe_code(first) if isinstance(first, n.PipeNode) else None
    value: Any = (first.value if isinstance(first, (n.BoolNode, n.NumberNode))
                  else first.text if isinstance(first, n.StringNode) else None)
    is_dot = isinstance(first, n.DotNode)
    wrong = ("nil is not a command" if isinstance(first, n.NilNode)
             else None if inner is not None or is_dot or isinstance(first, (n.BoolNode, n.NumberNode, n.StringNode))
             else f"can't evaluate command {first}")

    def operand(ex: Executor, dot: Any, final: Any) -> Any:
        ex.node = first
        ex.not_a_function(args, final)
        if inner is not None:
            return inner(ex, dot)
        if wrong is not None:
            raise ex.error(wrong)
        return dot if is_dot else value

    return operand


def _chain_code(chain: n.ChainNode, args: tuple[n.Node, ...]) -> Callable[[Executor, Any, Any, n.Node], Any]:
    """(.x).Field: the term evaluated, then its fields."""
    receiver = _arg_code(chain.node, None) if not isinstance(chain.node, n.NilNode) else None

    def run(ex: Executor, dot: Any, final: Any, where: n.Node) -> Any:
        ex.node = where
        if receiver is None:
            raise ex.error(f"indirection through explicit nil in {chain}")
        return ex.eval_field_chain(dot, receiver(ex, dot), chain, chain.field, args, final)

    return run


def _function_code(ident: n.IdentifierNode, args: tuple[n.Node, ...], where: n.Node | None) -> Command:
    """A call of a function (the command's first word, or an argument): `ident` is where it starts."""
    name = ident.name
    params = args[1:]
    if name in funcs.SHORT_CIRCUIT:
        operands = tuple(_arg_code(arg, name) for arg in params)
        stops_on = name == "or"

        def short(ex: Executor, dot: Any, final: Any) -> Any:
            ex.node = ident
            if not params and final is MISSING:
                raise ex.error(f"wrong number of args for {name}: want at least 1 got 0")
            value: Any = None
            for operand in operands:
                value = operand(ex, dot)
                if is_true(value) == stops_on:
                    return value
            if final is not MISSING:
                value = final
            return value

        return short
    operands = tuple(_arg_code(arg, name, position) for position, arg in enumerate(params))
    at = where or ident  # Go reports a call's errors at the whole command
    if name in ("eq", "ne") and len(operands) == 2 and isinstance(params[1], n.StringNode):
        return _compare_to_text(name, ident, at, operands[0], params[1].text)
    # eq, len, index, slice, not...: the function itself, once the count of arguments is right; printf and the
    # functions that build text from their arguments, and a wrong count, through call_function (its bounds and
    # messages, as funcs.call has them)
    fn, least, most = funcs.BUILTINS[name]
    general = name == "printf" or name in _BUILDS_TEXT
    what = f"the result of {name}"

    def call(ex: Executor, dot: Any, final: Any) -> Any:
        ex.node = ident
        values = [operand(ex, dot) for operand in operands]
        if final is not MISSING:
            values.append(final)
        ex.node = at
        if general or (len(values) < least if most is None else len(values) != least):
            return ex.call_function(name, values)
        return ex.apply(name, fn, values, what)

    return call


def _compare_to_text(name: str, ident: n.IdentifierNode, at: n.Node, operand: Eval, text: str) -> Command:
    """`eq .Role "user"` (and ne), the most common test of a chat template: a string compared at once; any
    other value, or a value piped in, goes the general way."""
    fn, _, _ = funcs.BUILTINS[name]
    is_eq = name == "eq"
    what = f"the result of {name}"

    def compare(ex: Executor, dot: Any, final: Any) -> Any:
        ex.node = ident
        value = operand(ex, dot)
        ex.node = at
        if final is MISSING and type(value) is str:
            return (value == text) is is_eq
        values = [value, text] if final is MISSING else [value, text, final]
        if len(values) != 2 and not is_eq:
            return ex.call_function(name, values)
        return ex.apply(name, fn, values, what)

    return compare


def _arg_code(arg: n.Node, func_name: str | None, position: int = 0) -> Eval:
    """An argument of a function (or a chain's term): its value."""
    single = (arg,)
    if isinstance(arg, n.DotNode):
        def dot_value(ex: Executor, dot: Any) -> Any:
            ex.node = arg
            return dot

        return dot_value
    if isinstance(arg, n.FieldNode):
        ident = arg.ident
        name = ident[0] if len(ident) == 1 else None

        def field(ex: Executor, dot: Any) -> Any:
            ex.node = arg
            if name is not None and type(dot) is GoStruct and name in dot.fields:
                return dot.fields[name]
            return ex.eval_field_chain(dot, dot, arg, ident, single, MISSING)

        return field
    if isinstance(arg, n.VariableNode):
        def variable(ex: Executor, dot: Any) -> Any:
            ex.node = arg
            return ex.eval_variable(dot, arg, single, MISSING)

        return variable
    if isinstance(arg, n.PipeNode):
        inner = _pipe_code(arg)

        def pipeline(ex: Executor, dot: Any) -> Any:
            ex.node = arg
            return inner(ex, dot)

        return pipeline
    if isinstance(arg, n.IdentifierNode):
        call = _function_code(arg, single, None)
        return lambda ex, dot: call(ex, dot, MISSING)
    if isinstance(arg, n.ChainNode):
        chain = _chain_code(arg, single)
        return lambda ex, dot: chain(ex, dot, MISSING, arg)
    wrong: str | None = None
    if isinstance(arg, n.NilNode):
        if func_name in funcs.VALUE_PARAMS:
            wrong = "cannot assign nil to reflect.Value"
        elif func_name == "printf" and position == 0:
            wrong = "cannot assign nil to string"
    elif not isinstance(arg, (n.BoolNode, n.NumberNode, n.StringNode)):
        wrong = f"can't handle {arg} as an argument"
    value: Any = (arg.value if isinstance(arg, (n.BoolNode, n.NumberNode))
                  else arg.text if isinstance(arg, n.StringNode) else None)

    def constant(ex: Executor, dot: Any) -> Any:
        ex.node = arg
        if wrong is not None:
            raise ex.error(wrong)
        return value

    return constant


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
