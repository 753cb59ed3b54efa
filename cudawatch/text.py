"""Untrusted names (kernels, jobs, hosts) made safe and short for terminals, HTML and Slack.

Kernel and job names come from user programs. ``terminal`` escapes what a terminal would obey
(C0/C1 control characters such as ESC, line and paragraph separators, and the bidi embedding,
override and isolate characters, e.g. U+202E) as visible ``\\xNN``/``\\uNNNN`` text, so a name can
neither move the cursor, recolour the screen nor reorder what follows. ``shorten_name`` is the one
rule for long names everywhere (terminal tables, the HTML report, Slack): a name longer than the
bound keeps its head and tail, loses the middle (template arguments), and gains its id, so two
long names that differ only in the middle stay distinguishable. Stdlib only.
"""

from __future__ import annotations

import re

#: Longest name shown whole; longer ones are shortened to this many characters, id included.
NAME_LIMIT = 80

# C0/C1 controls (tab and newline included: one cell is one line), DEL, U+2028/2029, and the bidi
# controls U+061C, U+200E/200F, U+202A-202E, U+2066-2069.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match) -> str:
    c = ord(match.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal(text: object) -> str:
    """``text`` for a terminal table cell or line: unsafe characters escaped visibly."""
    s = "" if text is None else str(text)
    return _UNSAFE.sub(_escape, s)


def strip_unsafe(text: object) -> str:
    """``text`` with the same characters removed (for sinks where an escape would read as noise)."""
    s = "" if text is None else str(text)
    return _UNSAFE.sub("", s)


def truncate_middle(text: str, limit: int) -> str:
    """Cut the middle of ``text`` to ``limit`` characters (head two thirds, tail one third)."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return "…"[:limit]
    head = (limit - 1) * 2 // 3
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def shorten_name(name: object, ident: object = None, limit: int = NAME_LIMIT) -> str:
    """``name`` if it fits in ``limit`` characters, else its head and tail plus ``[ident]``.

    The result is at most ``limit`` characters long (given ``limit`` > len(ident) + 10). Unsafe
    characters are removed first, so the count is of what is shown.
    """
    s = strip_unsafe(name)
    if len(s) <= limit:
        return s
    tag = f" [{strip_unsafe(ident)}]" if ident else ""
    room = limit - len(tag)
    if room < 10:
        return truncate_middle(s, limit)
    return truncate_middle(s, room) + tag
