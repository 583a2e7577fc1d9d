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
    """`call` with `name=value` appended, in the call's own layout (see `appended`)."""
    new_arg = cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE),
    )
    return appended(call, new_arg)


def appended(call: cst.Call, new_arg: cst.Arg) -> cst.Call:
    """`call` with `new_arg` (given without comma or whitespace) last, in the call's own layout.

    The new argument is separated from the last one as the last two are (or,
    for a single argument, as it is from `(` when that and the one before `)`
    are line breaks); a
    trailing comma and the whitespace before `)` move after it; a comment
    after the last argument stays on its line when arguments go one per line.
    No line gains trailing whitespace and `)` stays on its line.
    """
    args = list(call.args)
    if not args:
        return _only(call, new_arg)
    last = args[-1]
    trailing = last.comma if isinstance(last.comma, cst.Comma) else None
    # What lies between the last argument (and its trailing comma) and `)`.
    tail = trailing.whitespace_after if trailing is not None else last.whitespace_after_arg
    separator = _separator(call)
    if len(args) == 1 and not isinstance(tail, cst.ParenthesizedWhitespace):
        separator = cst.SimpleWhitespace(" ")  # `f(` / `x)`: `)` hugs the argument, the new one joins it
    between: cst.BaseParenthesizableWhitespace = separator
    if isinstance(tail, cst.ParenthesizedWhitespace) and isinstance(separator, cst.ParenthesizedWhitespace):
        # One argument per line: the last one keeps its comment and blank lines, the new one
        # goes on a line of its own and `)` stays on the line after it.
        between = tail.with_changes(indent=separator.indent, last_line=separator.last_line)
        tail = _line_break(tail)
    if trailing is not None:
        args[-1] = last.with_changes(comma=trailing.with_changes(whitespace_after=between))
        args.append(
            new_arg.with_changes(
                comma=trailing.with_changes(whitespace_after=tail),
                whitespace_after_arg=last.whitespace_after_arg,
            )
        )
    else:
        args[-1] = last.with_changes(
            comma=cst.Comma(whitespace_after=between), whitespace_after_arg=_NO_SPACE
        )
        args.append(new_arg.with_changes(whitespace_after_arg=tail))
    return call.with_changes(args=args)


def prepended(call: cst.Call, new_arg: cst.Arg) -> cst.Call:
    """`call` with `new_arg` (given without comma or whitespace) first, separated from the next
    argument as the first is from `(` when that is a line break (a comment there stays after
    `(`), else by one space."""
    if not call.args:
        return _only(call, new_arg)
    before = call.whitespace_before_args
    separator = (
        _line_break(before) if isinstance(before, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" ")
    )
    return call.with_changes(
        args=[new_arg.with_changes(comma=cst.Comma(whitespace_after=separator)), *call.args]
    )


def _only(call: cst.Call, new_arg: cst.Arg) -> cst.Call:
    """`call()` with `new_arg` as its one argument: `f(x)`, also from `f(` / `)`, unless a comment
    follows `(` (then `)` stays on its own line)."""
    before = call.whitespace_before_args
    if isinstance(before, cst.ParenthesizedWhitespace) and (before.first_line.comment or before.empty_lines):
        return call.with_changes(args=[new_arg.with_changes(whitespace_after_arg=_line_break(before))])
    return call.with_changes(args=[new_arg], whitespace_before_args=_NO_SPACE)


def _separator(call: cst.Call) -> cst.BaseParenthesizableWhitespace:
    """The whitespace that separates a new last argument from the one before it: as between the
    last two arguments, else as between `(` and the single argument when that is a line break,
    else one space. Without comments (a comment stays where it is, never copied)."""
    if len(call.args) >= 2:
        comma = call.args[-2].comma
        found = comma.whitespace_after if isinstance(comma, cst.Comma) else cst.SimpleWhitespace(" ")
    else:
        found = call.whitespace_before_args
    if isinstance(found, cst.ParenthesizedWhitespace):
        return _line_break(found)
    return found if isinstance(found, cst.SimpleWhitespace) and found.value else cst.SimpleWhitespace(" ")


def _line_break(whitespace: cst.ParenthesizedWhitespace) -> cst.ParenthesizedWhitespace:
    """A plain line break to the same indentation (no comment, no blank lines)."""
    return cst.ParenthesizedWhitespace(indent=whitespace.indent, last_line=whitespace.last_line)


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
