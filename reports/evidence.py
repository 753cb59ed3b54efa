"""A finding's evidence in one or two plain sentences, from the per-rule templates that live next
to the rules (``analytics.rules.EVIDENCE_TEMPLATES``). The raw numbers stay in ``findings.evidence``
(JSON, SQL) and on the detail page.

Each template gets ``ev`` (the evidence mapping), ``size`` (the regression's one size,
``Regression.size``), ``same`` (whether the regression measures this kernel's own per-launch time,
so the sentence restates the regression's number instead of the rule's window figure)
and ``gpu(uuid)`` (a GPU's ``host:index`` label). Values are escaped for HTML (``html=True``) or
left plain for text, Slack and the terminal (the caller escapes for its sink).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping

import jinja2
from markupsafe import Markup, escape

from analytics.results import Finding, Regression, fmt_value
from analytics.rules import EVIDENCE_TEMPLATES
from cudawatch.text import shorten_name

#: Event series that measure one kernel's own per-launch time (``same`` for kernel_slower & co).
_OWN_KERNEL_SERIES = ("kernel_mean_ns", "kernel_id_mean_ns")


def _v(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "–" if value is None else str(value)
    if isinstance(value, (int, float)):
        return fmt_value(float(value)) if not isinstance(value, int) else f"{value:,}"
    return str(value)


def _us(ns: Any) -> str:
    return "–" if not isinstance(ns, (int, float)) else fmt_value(float(ns) / 1e3)


def _share(value: Any) -> str:
    if not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
        return "–"
    pct = 100 * float(value)
    if pct == 0:
        return "0\u00a0%"  # a no-break space: the number and its unit stay on one line
    return f"{pct:.1f}\u00a0%" if abs(pct) >= 0.1 else "<\u00a00.1\u00a0%"


def _signed(pct: Any) -> str:
    return "–" if not isinstance(pct, (int, float)) else f"{float(pct):+.1f}%"


def _name(value: Any) -> str:
    return shorten_name(value, limit=60) if value else "a kernel"


@functools.lru_cache(maxsize=2)
def _env(html: bool) -> jinja2.Environment:
    env = jinja2.Environment(autoescape=html, undefined=jinja2.ChainableUndefined)
    env.filters.update(v=_v, us=_us, share=_share, signed=_signed, name=_name)
    return env


@functools.lru_cache(maxsize=64)
def _template(rule: str, html: bool) -> jinja2.Template | None:
    source = EVIDENCE_TEMPLATES.get(rule)
    return _env(html).from_string(source) if source else None


def sentence(f: Finding, r: Regression, *, html: bool = False, gpu_labels: Mapping[str, str] | None = None) -> str:
    """See ``_sentence``; with ``html`` the result is ``Markup`` (already escaped)."""
    text = _sentence(f, r, html=html, gpu_labels=gpu_labels)
    return Markup(text) if html else text


def _sentence(f: Finding, r: Regression, *, html: bool, gpu_labels: Mapping[str, str] | None) -> str:
    """The evidence of ``f`` (a cause of ``r``) in plain words; a rule without a template (or a
    template that fails on odd evidence) gives the raw ``key: value`` pairs instead."""
    labels = dict(gpu_labels or {})
    if r.gpu_uuid:
        labels.setdefault(r.gpu_uuid, r.gpu_label or r.gpu_uuid)
    ev = dict(f.evidence)
    same = r.series in _OWN_KERNEL_SERIES and (ev.get("kernel_id") in (None, r.kernel_id))
    template = _template(f.rule, html)
    if template is not None:
        try:
            return template.render(ev=ev, size=r.size, same=same, series=r.series, r=r, gpu=lambda u: labels.get(u, u or "?")).strip()
        except (TypeError, ValueError, AttributeError):
            pass
    text = "; ".join(f"{k}: {_v(v)}" for k, v in ev.items())
    return str(escape(text)) if html else text


__all__ = ["sentence"]
