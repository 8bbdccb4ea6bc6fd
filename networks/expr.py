"""Template substitution for network specs: ``"{width * 4}"`` inside a block.

A string that is exactly one ``{...}`` becomes the typed value of the expression; braces inside a
longer string are formatted into it (``"layer{i}"``). Expressions are small and safe: integer and
boolean arithmetic, comparisons, ``and``/``or``/``not`` and ``a if c else b`` over the block's
arguments. Nothing else is evaluated.
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}
_MAX_BITS = 4096  # integer results stay small enough to print and to compute quickly
_MAX_LEN = 10_000  # likewise for repeated strings
_WHOLE = re.compile(r"^\{([^{}]+)\}$")
_PART = re.compile(r"\{([^{}]+)\}")


class ExprError(ValueError):
    pass


def evaluate(text: str, env: dict[str, Any]) -> Any:
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _eval(tree.body, env, text)
    except (SyntaxError, ValueError) as err:  # ValueError: null bytes (Python 3.11)
        if isinstance(err, ExprError):
            raise
        raise ExprError(f"cannot read the expression '{text}'") from None
    except (RecursionError, MemoryError):
        raise ExprError(f"the expression '{text[:40]}...' nests too deeply") from None
    except ArithmeticError as err:  # 0 ** -1, 2.0 ** 10000
        raise ExprError(f"arithmetic error in '{{{text}}}': {err}") from None


def _eval(node: ast.AST, env: dict[str, Any], text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool, str)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ("true", "false"):
            return node.id == "true"
        if node.id not in env:
            known = ", ".join(sorted(env)) or "none"
            raise ExprError(f"unknown name '{node.id}' in '{{{text}}}' (arguments: {known})")
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        left, right = _eval(node.left, env, text), _eval(node.right, env, text)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ExprError(f"division by zero in '{{{text}}}'")
        _check_size(node.op, left, right, text)
        return _BIN[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval(node.operand, env, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, text)
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, env, text) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        return _CMP[type(node.ops[0])](_eval(node.left, env, text), _eval(node.comparators[0], env, text))
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env, text) else node.orelse, env, text)
    raise ExprError(f"'{{{text}}}' uses something templates do not allow (only arithmetic, "
                    "comparisons, and/or/not and 'a if c else b')")


def _int_bits(v: Any) -> int:
    return abs(v).bit_length() if isinstance(v, int) else 0


def _check_size(op: ast.operator, left: Any, right: Any, text: str) -> None:
    """Refuse operations whose result would be too large to compute or print."""
    big = False
    if isinstance(op, ast.Pow) and isinstance(right, int) and right > 0 and isinstance(left, int):
        big = abs(left) > 1 and (_int_bits(left) - 1) * right > _MAX_BITS
    elif isinstance(op, ast.Mult):
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, list)) and isinstance(n, int) and len(seq) * n > _MAX_LEN:
                big = True
        big = big or _int_bits(left) + _int_bits(right) > _MAX_BITS
    if big:
        raise ExprError(f"the result of '{{{text}}}' is too large")


def substitute(value: Any, env: dict[str, Any]) -> Any:
    """Substitute template expressions in a value (recursively through lists and dicts)."""
    if isinstance(value, str):
        whole = _WHOLE.match(value)
        if whole:
            return evaluate(whole.group(1), env)
        return _PART.sub(lambda m: str(evaluate(m.group(1), env)), value)
    if isinstance(value, list):
        return [substitute(v, env) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, env) for k, v in value.items()}
    return value
