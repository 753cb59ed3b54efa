"""The report's Jinja2 environment and its number/time/evidence filters (no warehouse access)."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any, Mapping

import jinja2

from analytics.results import SEVERITIES
from reports import evidence
from reports.escape import plain, truncate_middle

TEMPLATES = Path(__file__).parent / "templates"
STATUS_ORDER = ("new", "ongoing", "resolved")



def _fmt_num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if value == 0:
            return "0"
        mag = abs(value)
        if mag >= 1e6:
            return f"{value:,.0f}"
        if mag >= 100:
            return f"{value:,.1f}"
        return f"{value:.{digits}g}"
    return str(value)


def _fmt_pct(value: Any, digits: int = 1, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "new (was 0)" if value > 0 else "gone (now 0)"
    return f"{value:+.{digits}f}%" if signed else f"{value:.{digits}f}%"


def _fmt_share(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.1f}%"


def _fmt_p(value: Any) -> str:
    if value is None:
        return "–"
    v = float(value)
    return f"{v:.2g}" if v >= 1e-3 else f"{v:.1e}"


def _fmt_ts(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "–" if value is None else str(value)


def _fmt_evidence(value: Any, limit: int = 240) -> str:
    """One evidence value as text; ``limit`` > 0 shortens long values (lists of kernel names) in the
    middle, 0 keeps everything (detail page)."""
    text = _evidence_text(value)
    return truncate_middle(text, limit) if limit and len(text) > limit else text


def _evidence_text(value: Any) -> str:
    if isinstance(value, float):
        return _fmt_num(value, 4)
    if isinstance(value, (list, tuple)):
        return ", ".join(_evidence_text(v) for v in value[:12]) + (f" … (+{len(value) - 12})" if len(value) > 12 else "")
    if isinstance(value, Mapping):
        return "; ".join(f"{k}={_evidence_text(v)}" for k, v in list(value.items())[:12])
    if isinstance(value, dt.datetime):
        return _fmt_ts(value)
    return str(value)


def _fmt_share_fine(value: Any) -> str:
    """A share that keeps small values visible: ``0.02 %``, ``< 0.01 %``."""
    if value is None:
        return "–"
    pct = 100 * float(value)
    if pct == 0:
        return "0%"
    return f"{pct:.1f}%" if pct >= 1 else (f"{pct:.2f}%" if pct >= 0.01 else "< 0.01%")


def _rule_title(rule: str) -> str:
    return rule.replace("_", " ")


def env(text: bool = False) -> jinja2.Environment:
    """The Jinja2 environment of the report templates (HTML autoescaped; text with ``plain``)."""
    if text:
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=False, finalize=plain,
            trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined,
        )
    else:
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=jinja2.select_autoescape(["html"], default_for_string=True),
            trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
        )
    env.filters.update(num=_fmt_num, pct=_fmt_pct, share=_fmt_share, pval=_fmt_p, ts=_fmt_ts, evidence=_fmt_evidence,
                       rule=_rule_title, shorten=truncate_middle, share_fine=_fmt_share_fine)
    html = not text

    def _sentence(f, r, gpu_labels=None):
        return evidence.sentence(f, r, html=html, gpu_labels=gpu_labels)

    env.filters["sentence"] = _sentence
    env.globals.update(SEVERITIES=SEVERITIES[::-1], STATUS_ORDER=STATUS_ORDER)
    return env
