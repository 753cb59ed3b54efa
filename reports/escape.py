"""Escaping of untrusted strings for each place they are rendered.

Kernel, job and host names come from user programs, so any of them may be ``<script>`` or
``<!channel>``. HTML is escaped by jinja2's autoescape (``select_autoescape``); this module covers
the other sinks: Slack mrkdwn, plain text, and e-mail headers.
"""

from __future__ import annotations

import re
import unicodedata

# C0/C1 control characters except tab and newline (kept where a caller allows them).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def slack(text: object, limit: int | None = None) -> str:
    """Escape ``text`` for Slack mrkdwn.

    Slack's documented rule (api.slack.com, "Formatting text for app surfaces", escaping text):
    replace ``&`` with ``&amp;``, ``<`` with ``&lt;`` and ``>`` with ``&gt;``. With ``<`` gone no
    ``<!channel>``, ``<!here>``, ``<@U123>`` or ``<http://x|link>`` can be formed. Control
    characters and line breaks are removed. ``limit`` truncates (before escaping) with an ellipsis.
    """
    s = single_line(text)
    if limit is not None and len(s) > limit:
        s = truncate_middle(s, limit)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_code(text: object, limit: int | None = None) -> str:
    """``text`` as a Slack inline code span: escaped like :func:`slack`, with backticks replaced
    so the span cannot be closed early; inside the span ``_`` and ``*`` in C++ names stay literal."""
    return "`" + slack(single_line(text).replace("`", "'"), limit) + "`"


def single_line(text: object) -> str:
    """``text`` as one line: control characters and line breaks removed (for headers, subjects,
    Slack fields and plain-text table cells)."""
    s = "" if text is None else str(text)
    s = s.replace("\r", " ").replace("\n", " ").replace("\t", " ")
    return _CONTROL.sub("", s)


def plain(text: object) -> str:
    """``text`` for the plain-text e-mail body: one line, no control or bidi-override characters,
    normalised to NFC so look-alike sequences do not hide in combining marks."""
    return unicodedata.normalize("NFC", single_line(text))


def header(text: object, limit: int = 200) -> str:
    """``text`` safe for an e-mail header value (no CR/LF injection), truncated to ``limit``."""
    s = plain(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def truncate_middle(text: object, limit: int) -> str:
    """Shorten long demangled C++ names by cutting the middle (template arguments) and keeping
    the head (namespace, function) and the tail (last parameters)."""
    s = single_line(text)
    if len(s) <= limit:
        return s
    head = (limit - 1) * 2 // 3
    return s[:head] + "…" + s[len(s) - (limit - 1 - head):]
