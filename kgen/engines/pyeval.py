"""What an engine's Python will compute, without running it: a tiny interpreter over libcst nodes.

An engine's byte math is a handful of integer expressions inside methods (`index_head_dim + 4`,
`self.page_size * self.get_bytes_per_token()`, `68 if use_fp4_indexer else 132`), sometimes routed
through a module-level helper in another file. `Evaluator` evaluates exactly that subset: integer
literals, names and `self.x` attributes bound by the caller's environment or by earlier assignments,
+ - * // % /, comparisons, `and`/`or`/`not`, conditional expressions, calls of functions and methods
defined in the engine tree (their `if`/`return` bodies, indented or on the `def` line), and module
constants the tree imports. Anything else raises `Unknown`: the audit then says it could not read
the value, never guesses. So does legal code whose value is an error or absurd: a division by zero,
`"a" + 1`, `None + 1`, constants defined in terms of each other, integers of more than
`MAX_INT_DIGITS` digits or results beyond `MAX_INT_BITS` bits, strings longer than `MAX_TEXT`, and a
value the audit compares with a byte count that is not an integer (`264 / 2` is 132.0: the engine
would hand torch a float).
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst


class Unknown(Exception):
    """The expression depends on something the interpreter cannot know (a tensor, the GPU...)."""


def dotted(node: cst.CSTNode) -> str | None:
    """`a.b.c` for names and attribute chains; `f()` / `a.f()` for calls without arguments."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    if isinstance(node, cst.Call) and not node.args:
        base = dotted(node.func)
        return None if base is None else f"{base}()"
    return None


_BINARY: dict[type, Callable] = {
    cst.Add: operator.add, cst.Subtract: operator.sub, cst.Multiply: operator.mul,
    cst.FloorDivide: operator.floordiv, cst.Modulo: operator.mod, cst.Divide: operator.truediv,
}
_COMPARE: dict[type, Callable] = {
    cst.Equal: operator.eq, cst.NotEqual: operator.ne, cst.LessThan: operator.lt,
    cst.GreaterThan: operator.gt, cst.LessThanEqual: operator.le, cst.GreaterThanEqual: operator.ge,
    cst.Is: operator.is_, cst.IsNot: operator.is_not,
}
_CONSTANTS = {"True": True, "False": False, "None": None}
_MAX_DEPTH = 32  # calls deep: an engine helper never recurses; a cycle is not byte math
MAX_INT_DIGITS = 100  # a literal: byte math has a handful of digits (Python refuses > 4300 to parse)
MAX_INT_BITS = 256  # a result: sizes are far below 2**64
MAX_TEXT = 1 << 16  # characters (or items) of a string, bytes or tuple value


@dataclass(frozen=True)
class Returns:
    """An environment entry for a callee whose value the audited mode fixes whatever its
    arguments (`kgen_indexer.in_use(pool)`: whether the pool holds kgen's keys)."""

    value: object


@dataclass(frozen=True)
class Constant:
    """A module-level constant of another file of the tree, as an import names it: its expression,
    evaluated lazily in its own module's scope (`from vllm.x import MXFP4_BLOCK_SIZE`)."""

    name: str
    value: cst.BaseExpression
    module: ModuleScope


@dataclass
class Function:
    """A function or method found in the tree, with what its body may refer to."""

    node: cst.FunctionDef
    module: ModuleScope
    cls: cst.ClassDef | None = None


class ModuleScope:
    """Top-level functions, classes, constants and imports of one parsed module."""

    def __init__(self, rel: str, module: cst.Module, resolve_import: Callable[[str, str], object] | None = None):
        self.rel = rel
        self.module = module
        self.functions: dict[str, cst.FunctionDef] = {}
        self.classes: dict[str, cst.ClassDef] = {}
        self.constants: dict[str, cst.BaseExpression] = {}
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (module, name)
        self._resolve_import = resolve_import
        for stmt in module.body:
            if isinstance(stmt, cst.FunctionDef):
                self.functions[stmt.name.value] = stmt
            elif isinstance(stmt, cst.ClassDef):
                self.classes[stmt.name.value] = stmt
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Assign) and len(small.targets) == 1:
                        name = dotted(small.targets[0].target)
                        if name and "." not in name:
                            self.constants[name] = small.value
                    elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                        mod = _module_name(small)
                        for alias in small.names:
                            local = dotted(alias.asname.name) if alias.asname else dotted(alias.name)
                            if local and mod:
                                self.imports[str(local)] = (mod, str(dotted(alias.name)))

    def imported(self, name: str):
        """The Function or Constant a name imported from elsewhere in the tree refers to (None when
        the tree does not define it)."""
        if name not in self.imports or self._resolve_import is None:
            return None
        return self._resolve_import(*self.imports[name])


def _module_name(node: cst.ImportFrom) -> str | None:
    if node.relative or node.module is None:
        return None
    return dotted(node.module)


def methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    out: dict[str, cst.FunctionDef] = {}
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef):
            out[stmt.name.value] = stmt
    return out


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class Evaluator:
    """Evaluate engine expressions under an environment of known values.

    `env` maps dotted names (`self.index_head_dim`, `use_fp4_indexer`,
    `get_exec().kernel.enable_deepseek_v4_fp4_indexer`, `kgen_indexer.enabled()`) to values; the
    environment stands for the engine's configuration in the mode being audited.
    `attribute` resolves module attributes the environment does not name (generated constants)."""

    def __init__(self, env: dict[str, object], attribute: Callable[[str], object] | None = None):
        self.env = env
        self.attribute = attribute or (lambda _name: None)
        self._depth = 0
        self._active: set[tuple] = set()  # constants being evaluated: one met again is a cycle

    @contextlib.contextmanager
    def _resolving(self, key: tuple) -> Iterator[None]:
        if key in self._active:
            raise Unknown(f"{key[-1]} is defined in terms of itself")
        if len(self._active) >= _MAX_DEPTH:  # a chain of constants through many modules
            raise Unknown(f"{key[-1]} is defined through more than {_MAX_DEPTH} other constants")
        self._active.add(key)
        try:
            yield
        finally:
            self._active.discard(key)

    # -- expressions --------------------------------------------------------------------------
    def expr(self, node: cst.BaseExpression, scope: dict[str, object], fn: Function | None):
        if isinstance(node, cst.Integer):
            digits = sum(c.isalnum() for c in node.value)
            if digits > MAX_INT_DIGITS:
                raise Unknown(f"an integer literal of {digits} digits")
            return node.evaluated_value
        if isinstance(node, cst.SimpleString):
            return node.evaluated_value
        name = dotted(node)
        if name is not None:
            found, value = self._lookup(name, scope, fn)
            if found:
                return value
        if isinstance(node, cst.BinaryOperation):
            op = _BINARY.get(type(node.operator))
            if op is None:
                raise Unknown(f"operator {type(node.operator).__name__}")
            return _apply(op, self.expr(node.left, scope, fn), self.expr(node.right, scope, fn))
        if isinstance(node, cst.UnaryOperation):
            value = self.expr(node.expression, scope, fn)
            if isinstance(node.operator, cst.Not):
                return not value
            if isinstance(node.operator, (cst.Minus, cst.Plus)):
                return _apply(operator.neg if isinstance(node.operator, cst.Minus) else operator.pos, value)
            raise Unknown("unary operator")
        if isinstance(node, cst.BooleanOperation):
            return self._boolean(node, scope, fn)
        if isinstance(node, cst.Comparison):
            left = self.expr(node.left, scope, fn)
            for target in node.comparisons:
                op = _COMPARE.get(type(target.operator))
                if op is None:
                    raise Unknown("comparison")
                right = self.expr(target.comparator, scope, fn)
                if not _apply(op, left, right):
                    return False
                left = right
            return True
        if isinstance(node, cst.IfExp):
            test = self.expr(node.test, scope, fn)
            return self.expr(node.body if test else node.orelse, scope, fn)
        if isinstance(node, cst.Call):
            return self._call(node, scope, fn)
        raise Unknown(f"cannot evaluate {type(node).__name__}")

    def _boolean(self, node: cst.BooleanOperation, scope, fn):
        """Short-circuit with unknowns: `False and ?` is False, `True or ?` is True."""
        is_and = isinstance(node.operator, cst.And)
        try:
            left = self.expr(node.left, scope, fn)
        except Unknown:
            right = self.expr(node.right, scope, fn)
            if bool(right) != is_and:
                return right
            raise
        if bool(left) != is_and:
            return left
        return self.expr(node.right, scope, fn)

    def _lookup(self, name: str, scope: dict[str, object], fn: Function | None) -> tuple[bool, object]:
        if name in scope:
            value = scope[name]
            if value is _UNBOUND:
                raise Unknown(f"{name} is computed from values the audit cannot know")
            return True, value
        if name in self.env:
            return True, self.env[name]
        if name in _CONSTANTS:
            return True, _CONSTANTS[name]
        if fn is not None and "." not in name:
            if name in fn.module.constants:
                with self._resolving(("module", fn.module.rel, name)):
                    return True, self.expr(fn.module.constants[name], {}, Function(fn.node, fn.module))
            imported = fn.module.imported(name)
            if isinstance(imported, Constant):
                with self._resolving(("module", imported.module.rel, imported.name)):
                    return True, self.expr(imported.value, {}, Function(fn.node, imported.module))
        if fn is not None and fn.cls is not None and name.startswith("self.") and name.count(".") == 1:
            attr = name.split(".", 1)[1]
            for stmt in fn.cls.body.body:  # a class attribute (`quant_block_size = 128`)
                if isinstance(stmt, cst.SimpleStatementLine):
                    for small in stmt.body:
                        if isinstance(small, cst.Assign) and dotted(small.targets[0].target) == attr:
                            with self._resolving(("class", fn.module.rel, fn.cls.name.value, attr)):
                                return True, self.expr(small.value, {}, fn)
        value = self.attribute(name)
        if value is not None:
            return True, value
        return False, None

    def _call(self, node: cst.Call, scope, fn: Function | None):
        fixed = self.env.get(dotted(node.func) or "")
        if isinstance(fixed, Returns):
            return fixed.value
        callee = self._callee(node.func, fn)
        if callee is None:
            raise Unknown(f"call of {dotted(node.func) or 'an expression'}")
        args = [self.expr(a.value, scope, fn) for a in node.args if a.keyword is None and not a.star]
        kwargs = {a.keyword.value: self.expr(a.value, scope, fn) for a in node.args if a.keyword is not None}
        self_scope = {k: v for k, v in scope.items() if k.startswith("self.")} if callee.cls is not None else {}
        return self._invoke(callee, args, kwargs, self_scope)

    def _callee(self, func: cst.BaseExpression, fn: Function | None) -> Function | None:
        if fn is None:
            return None
        if isinstance(func, cst.Name):
            name = func.value
            if name in fn.module.functions:
                return Function(fn.module.functions[name], fn.module)
            imported = fn.module.imported(name)
            return imported if isinstance(imported, Function) else None
        if isinstance(func, cst.Attribute) and dotted(func.value) == "self" and fn.cls is not None:
            method = methods(fn.cls).get(func.attr.value)
            if method is not None:
                return Function(method, fn.module, fn.cls)
        return None

    # -- function bodies ----------------------------------------------------------------------
    def _bind(self, fn: Function, args: list, kwargs: dict, self_scope: dict | None) -> dict[str, object]:
        scope: dict[str, object] = dict(self_scope or {})
        params = [p.name.value for p in fn.node.params.params]
        if fn.cls is not None and params and params[0] == "self":
            params = params[1:]
        for name, value in zip(params, args):
            scope[name] = value
        for name in params[len(args):]:
            if name in kwargs:
                scope[name] = kwargs[name]
        for p in fn.node.params.kwonly_params:
            if p.name.value in kwargs:
                scope[p.name.value] = kwargs[p.name.value]
        return scope

    def outcomes(self, fn: Function, args: list, kwargs: dict) -> list:
        """Every value `fn` may return, following both branches of each `if` whose test the
        interpreter cannot know (an environment switch, the GPU); a value it cannot compute is
        `UNKNOWN`. For guards such as "may this path run?": all outcomes False means it never does."""
        results: list = []
        try:
            self._explore(_statements(fn.node.body), self._bind(fn, args, kwargs, None), fn, results)
        except RecursionError:
            raise Unknown("the code nests too deep to follow") from None
        return results

    def _explore(self, statements: list, scope: dict[str, object], fn: Function, results: list) -> None:
        if len(results) > _MAX_PATHS:
            raise Unknown("too many paths")
        for i, stmt in enumerate(statements):
            rest = statements[i + 1:]
            if isinstance(stmt, (cst.SimpleStatementLine, cst.BaseSmallStatement)):
                for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else [stmt]:
                    if isinstance(small, cst.Return):
                        try:
                            results.append(None if small.value is None else self.expr(small.value, scope, fn))
                        except Unknown:
                            results.append(UNKNOWN)
                        return
                    if isinstance(small, cst.Raise):
                        return  # no value on this path
                    self._small(small, scope, fn)
            elif isinstance(stmt, cst.If):
                branches = [_statements(stmt.body), _statements(_else_body(stmt))]
                try:
                    branches = [branches[0] if self.expr(stmt.test, scope, fn) else branches[1]]
                except Unknown:
                    pass
                for branch in branches:
                    self._explore(branch + rest, dict(scope), fn, results)
                return
            elif isinstance(stmt, cst.With):
                self._explore(_statements(stmt.body) + rest, scope, fn, results)
                return
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                continue
            else:  # loops, try: values assigned inside are unknown
                for target in _assigned_names(stmt):
                    scope[target] = _UNBOUND
        results.append(None)  # fell off the end

    def call(self, fn: Function, args: list, kwargs: dict, self_scope: dict | None = None):
        """The value `fn` returns for these arguments (its `if`/`return` body interpreted): what the
        audit compares with the spec, so it must be an integer (or a non-number such as a string)."""
        return _checked(lambda: self._invoke(fn, args, kwargs, self_scope))

    def _invoke(self, fn: Function, args: list, kwargs: dict, self_scope: dict | None = None):
        if self._depth > _MAX_DEPTH:
            raise Unknown("calls nest too deep")
        scope = self._bind(fn, args, kwargs, self_scope)
        self._depth += 1
        try:
            self.run(fn.node.body, scope, fn)
        except _Return as r:
            return r.value
        finally:
            self._depth -= 1
        raise Unknown(f"{fn.node.name.value} returns no value the audit can follow")

    def run(self, body, scope: dict[str, object], fn: Function, stop_at: cst.CSTNode | None = None) -> bool:
        """Run statements until a return (raises _Return) or `stop_at` (returns True when reached).
        Assignments the interpreter cannot evaluate bind the name as unknown rather than failing:
        only values actually read must be known."""
        for stmt in _statements(body):
            if stop_at is not None and stmt is stop_at:
                return True
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if stop_at is not None and small is stop_at:
                        return True
                    self._small(small, scope, fn)
            elif isinstance(stmt, cst.BaseSmallStatement):  # a suite on the header's line: `def f(): return 1`
                self._small(stmt, scope, fn)
            elif isinstance(stmt, cst.If):
                if stop_at is not None and _contains(stmt, stop_at):
                    # the target lies inside this branch: follow the branch that holds it
                    for branch in _branches(stmt):
                        if _contains(branch, stop_at):
                            return self.run(branch.body, scope, fn, stop_at)
                try:
                    test = self.expr(stmt.test, scope, fn)
                except Unknown:
                    if stop_at is None:
                        raise
                    continue
                taken = stmt.body if test else _else_body(stmt)
                if taken is not None and self.run(taken, scope, fn, stop_at):
                    return True
            elif isinstance(stmt, cst.With):
                if self.run(stmt.body, scope, fn, stop_at):
                    return True
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                continue
            else:  # loops, try: values assigned inside are unknown
                for target in _assigned_names(stmt):
                    scope[target] = _UNBOUND
        return False

    def _small(self, small: cst.BaseSmallStatement, scope, fn: Function) -> None:
        if isinstance(small, cst.Return):
            if small.value is None:
                raise _Return(None)
            raise _Return(self.expr(small.value, scope, fn))
        if isinstance(small, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            value = small.value
            for target in targets:
                name = dotted(target)
                if name is None or value is None:
                    continue
                try:
                    scope[name] = self.expr(value, scope, fn)
                except Unknown:
                    # a flag the engine derives from what the audit cannot read (`self.use_fp4_kv =
                    # dsa_indexer_uses_fp4(vllm_config)`): the environment states the audited mode
                    scope[name] = self.env.get(name, _UNBOUND)

    def value_at(self, fn: Function, stop: cst.CSTNode, expr: cst.BaseExpression, self_scope: dict | None = None):
        """The value of `expr` where statement `stop` runs, with the function's earlier statements
        (and the branches that lead to `stop`) run first."""
        def value():
            scope: dict[str, object] = dict(self_scope or {})
            try:
                self.run(fn.node.body, scope, fn, stop_at=stop)
            except _Return:
                pass
            return self.expr(expr, scope, fn)

        return _checked(value)


class _UnboundType:
    def __repr__(self) -> str:
        return "<unknown>"


_UNBOUND = _UnboundType()
UNKNOWN = _UnboundType()  # an outcome the interpreter cannot compute
_MAX_PATHS = 512  # outcomes explored per function: engine guards have a handful


def _statements(body) -> list:
    """The statements of an indented block, a one-line suite, or an elif (a list of one If)."""
    if body is None:
        return []
    if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)):
        return list(body.body)
    return list(body)


def _branches(stmt: cst.If):
    node: cst.If | cst.Else | None = stmt
    while node is not None:
        yield node
        node = node.orelse if isinstance(node, cst.If) else None


def _else_body(stmt: cst.If):
    if stmt.orelse is None:
        return None
    if isinstance(stmt.orelse, cst.Else):
        return stmt.orelse.body
    return [stmt.orelse]  # elif: a nested If


def _contains(node: cst.CSTNode, target: cst.CSTNode) -> bool:
    found = False

    class _Find(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal found
            if n is target:
                found = True
            return not found

    node.visit(_Find())
    return found


def _assigned_names(stmt: cst.CSTNode) -> list[str]:
    names: list[str] = []

    class _Collect(cst.CSTVisitor):
        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
            name = dotted(n.target)
            if name:
                names.append(name)

    stmt.visit(_Collect())
    return names


def _size(value) -> int:
    return len(value) if isinstance(value, (str, bytes, tuple, list)) else 0


def _apply(op: Callable, *operands):
    """`op(*operands)` as the engine's Python would compute it, or Unknown where that raises (a
    division by zero, a type error) or would build an absurd value (a huge integer or string)."""
    if op is operator.mul and len(operands) == 2:
        count = [v for v in operands if isinstance(v, int)]
        seq = [v for v in operands if isinstance(v, (str, bytes, tuple, list))]
        if seq and count and _size(seq[0]) * max(0, count[0]) > MAX_TEXT:
            raise Unknown(f"a repetition of {_size(seq[0]) * count[0]} items")
    try:
        value = op(*operands)
    except (ArithmeticError, TypeError, ValueError, MemoryError) as e:
        shown = ", ".join(_short(v) for v in operands)
        raise Unknown(f"{op.__name__}({shown}) raises {type(e).__name__}: {e}") from None
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise Unknown(f"an integer of {value.bit_length()} bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise Unknown(f"{value}")
    if _size(value) > MAX_TEXT:
        raise Unknown(f"a value of {_size(value)} items")
    return value


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _checked(compute: Callable[[], object]):
    """A value the audit compares with the spec: never a float (an integral one would compare equal
    to a byte count it is not); a recursion too deep to follow is Unknown, not a crash."""
    try:
        value = compute()
    except RecursionError:
        raise Unknown("the code nests too deep to follow") from None
    if isinstance(value, float):
        raise Unknown(f"the engine computes {value!r}, a float (true division `/`?), where a byte count or "
                      "token count is an integer")
    return value
