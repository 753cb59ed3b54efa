"""Report charts as PNG bytes (matplotlib, Agg backend): no JavaScript, and e-mail clients show
them (inline ``cid:`` images in mail, ``data:`` URIs in the HTML file).

Each function takes plain values and returns PNG bytes rendered at 2x for sharp display on
high-density screens. Text drawn from untrusted names (kernel, job, host) is rasterised, so it can
never become markup; long C++ names are shortened in the middle.
"""

from __future__ import annotations

import datetime as dt
import io
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analytics.results import metric_of  # noqa: E402
from reports.escape import truncate_middle  # noqa: E402

DPI = 160
INK = "#1f2933"
MUTED = "#7b8794"
GRID = "#e4e7eb"
BLUE = "#2563eb"
RED = "#dc2626"
BAND = "#bfdbfe"

_RC = {
    "font.size": 9,
    "axes.edgecolor": GRID,
    "axes.labelcolor": INK,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "xtick.color": MUTED,
    "ytick.color": MUTED,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.fonttype": "none",
    # Labels carry untrusted kernel and job names: never interpret `$...$` as mathtext.
    "text.parse_math": False,
}


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    return buf.getvalue()


def unit_of(series: str) -> tuple[str, float]:
    """Display unit and scale of a series (analytics.results.METRICS, the one table of labels)."""
    m = metric_of(series)
    return m.unit, m.scale


def regression_chart(
    points: list[tuple[dt.datetime, float]],
    onset: dt.datetime,
    before: float,
    after: float,
    series: str,
    *,
    band: tuple[float, float] | None = None,
    width_in: float = 7.6,
) -> bytes:
    """Hourly series with the baseline band (before the change point), the segment means before
    and after, and the change point marked at ``onset``."""
    metric = metric_of(series)
    unit, scale = metric.unit, metric.scale
    with plt.rc_context(_RC):
        # 5.4 x 2.6 in with 10 pt ticks: about 9 px text when a phone shows it 380 px wide, 16 px at 680 px
        fig, ax = plt.subplots(figsize=(min(width_in, 5.4) if width_in < 9 else width_in, 2.6))
        if points:
            xs = [p[0] for p in points]
            ys = np.array([p[1] for p in points]) * scale
            pre = [x for x in xs if x < onset]
            if band is not None and pre:
                ax.fill_between([pre[0], onset], band[0] * scale, band[1] * scale, color=BAND, alpha=0.6, lw=0, label="baseline band")
            if pre:
                ax.hlines(before * scale, pre[0], onset, colors=BLUE, linestyles="--", lw=1, label="mean before")
            post = [x for x in xs if x >= onset]
            if post:
                ax.hlines(after * scale, onset, post[-1], colors=RED, linestyles="--", lw=1, label="mean after")
            ax.plot(xs, ys, color=INK, lw=1.4, marker="o", ms=2.2, label=metric.label)
            ax.axvline(onset, color=RED, lw=1.2, label=f"change {onset:%m-%d %H:00} UTC")
            ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d\n%H:00", tz=dt.timezone.utc))
            ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=4, maxticks=9, tz=dt.timezone.utc))
            ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=9, frameon=False, ncol=3, handlelength=1.2, columnspacing=1.0)
            ax.tick_params(labelsize=10)
        else:
            ax.text(0.5, 0.5, "no data for this series in the warehouse", ha="center", va="center", color=MUTED, transform=ax.transAxes)
        ax.set_ylabel(f"{metric.label} ({unit})" if unit else metric.label, fontsize=10)
        ax.grid(axis="y", color=GRID, lw=0.6)
        return _png(fig)


def top_kernels_chart(rows: list[dict], *, width_in: float = 7.6) -> bytes:
    """Horizontal bars of GPU hours for the top kernels (name shortened, job in brackets)."""
    rows = list(rows)[::-1]
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(width_in, 0.34 * max(len(rows), 3) + 0.6))
        if rows:
            labels = [f"{truncate_middle(r['kernel'], 64)}  [{truncate_middle(r['job'], 18)}]" for r in rows]
            values = [float(r["gpu_hours"] or 0) for r in rows]
            bars = ax.barh(range(len(rows)), values, color=BLUE, height=0.62)
            ax.set_yticks(range(len(rows)), labels, fontsize=7.5, color=INK)
            for bar, r in zip(bars, rows):
                ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {100 * (r['share'] or 0):.1f}%",
                        va="center", fontsize=7.5, color=MUTED)
            ax.set_xlabel("GPU hours (kernel time)", fontsize=8)
            ax.margins(x=0.12)
            ax.grid(axis="x", color=GRID, lw=0.6)
        else:
            ax.text(0.5, 0.5, "no kernel data", ha="center", va="center", color=MUTED, transform=ax.transAxes)
            ax.set_yticks([])
        return _png(fig)


def utilisation_heatmap(gpus: list[str], hours: list[dt.datetime], values: list[list[float]], *, width_in: float = 7.6) -> bytes:
    """GPU × hour heatmap of mean SM utilisation (%); white cells have no samples (a data gap)."""
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(width_in, 0.2 * max(len(gpus), 4) + 1.1))
        if gpus and hours:
            data = np.ma.masked_invalid(np.array(values, dtype=float))
            cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
            im = ax.imshow(data, aspect="auto", cmap=cmap, vmin=0, vmax=100, interpolation="nearest")
            step = max(1, math.ceil(len(hours) / 12))
            ax.set_xticks(range(0, len(hours), step), [f"{h:%H:00}" if h.hour or step > 1 else f"{h:%m-%d}" for h in hours[::step]],
                          fontsize=7)
            ystep = max(1, math.ceil(len(gpus) / 24))
            ax.set_yticks(range(0, len(gpus), ystep), [truncate_middle(g, 24) for g in gpus[::ystep]], fontsize=7, color=INK)
            ax.set_xlabel("hour (UTC)", fontsize=8)
            cb = fig.colorbar(im, ax=ax, fraction=0.025, pad=0.01)
            cb.set_label("SM util %", fontsize=7)
            cb.ax.tick_params(labelsize=7)
            for spine in ax.spines.values():
                spine.set_visible(False)
        else:
            ax.text(0.5, 0.5, "no device samples (run `cudawatch agent` on GPU hosts)", ha="center", va="center", color=MUTED,
                    transform=ax.transAxes)
            ax.set_yticks([])
            ax.set_xticks([])
        return _png(fig)
