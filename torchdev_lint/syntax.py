"""Small helpers for reading and rewriting LibCST call syntax, shared by rules."""

from __future__ import annotations

from collections import Counter

import libcst as cst

_NO_SPACE = cst.SimpleWhitespace("")


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    """The `name=...` argument of a call, if given."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def keyword_is_true(call: cst.Call, name: str) -> bool:
    """Whether the call passes `name=True` literally."""
    arg = keyword(call, name)
    return arg is not None and isinstance(arg.value, cst.Name) and arg.value.value == "True"


def positional(call: cst.Call) -> list[cst.Arg]:
    """Plain positional arguments, up to the first `*args` (after which positions are unknown)."""
    result = []
    for arg in call.args:
        if arg.star == "*":
            break
        if arg.keyword is None and not arg.star:
            result.append(arg)
    return result


def has_star(call: cst.Call, star: str = "**") -> bool:
    """Whether the call unpacks `*args` (star="*") or `**kwargs` (star="**")."""
    return any(arg.star == star for arg in call.args)


def argument(call: cst.Call, index: int, name: str) -> cst.Arg | None:
    """The argument bound to parameter `name` at position `index`, if it is given."""
    found = keyword(call, name)
    if found is not None:
        return found
    args = positional(call)
    return args[index] if index < len(args) else None


def with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """`call` with `name=value` appended, keeping its layout and trailing comma."""
    new_arg = cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE),
    )
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new_arg])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        # A trailing comma: the new argument takes it, and gets the same
        # separation from the previous one as the first argument has from `(`.
        separator = call.whitespace_before_args
        if not isinstance(separator, cst.ParenthesizedWhitespace):
            separator = cst.SimpleWhitespace(" ")
        args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=separator))
        args.append(new_arg.with_changes(comma=last.comma))
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(new_arg)
    return call.with_changes(args=args)


def method_call(
    receiver: cst.BaseExpression, method: str, args: list[cst.Arg] | tuple[cst.Arg, ...] = ()
) -> cst.Call:
    """`receiver.method(args)`, parenthesising the receiver where precedence needs it."""
    if not isinstance(receiver, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not receiver.lpar:
        receiver = receiver.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(func=cst.Attribute(value=receiver, attr=cst.Name(method)), args=args)


def comments(node: cst.CSTNode) -> Counter[str]:
    """The comments inside a node, counted: a fix whose replacement has fewer would drop one."""
    found: Counter[str] = Counter()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Comment):
            found[current.value] += 1
        else:
            stack.extend(current.children)
    return found
