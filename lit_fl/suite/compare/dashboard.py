"""The self-contained HTML dashboard: plotly figures with plotly.js inlined, so the file opens offline.

Per metric (the accuracy panels first, then every other numeric column of metrics.csv) two figures, against round
and against cumulative MB (and for the accuracy panels of differentially private runs a third, against the epsilon
spent): per configuration the mean over seeds as a
line with a +- std band, and every seed as a thin line that the legend switches on (hover: run name, value).
"""

from __future__ import annotations

import functools
import html
import math
from pathlib import Path
from typing import Any

import plotly.io as pio
from plotly.offline import get_plotlyjs

from lit_fl.io import atomic_write_text
from lit_fl.suite.compare.curves import (
    AXIS_TITLES,
    EPSILON_AXIS,
    VIRTUAL_AXIS,
    axes,
    color,
    curve,
    every_numeric_column,
    methods,
    title,
)
from lit_fl.suite.compare.results import Comparison

PLOT_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def figure(comparison: Comparison, metric: str, axis: str) -> dict[str, Any]:
    """One figure as plotly's JSON (``data`` and ``layout``), written as plain dicts: thousands of runs make
    thousands of traces, which plotly's validating ``graph_objects`` build a hundred times slower."""
    traces: list[dict[str, Any]] = []
    for i, group in enumerate(comparison.groups):
        colour = color(i)
        c = curve(group, metric)
        if not c.rounds or all(math.isnan(v) for v in c.x(axis)):  # against epsilon: a run without privacy
            continue
        x = c.x(axis)
        upper = [m + s for m, s in zip(c.mean, c.std)]
        lower = [m - s for m, s in zip(c.mean, c.std)]
        traces.append(_scatter(
            x=x + x[::-1], y=upper + lower[::-1], mode="lines", fill="toself", fillcolor=_alpha(colour, 0.15),
            line={"width": 0},
            hoverinfo="skip", showlegend=False, legendgroup=group.label, name=f"{group.label} ± std",
        ))
        traces.append(_scatter(
            x=x, y=c.mean, mode="lines+markers", name=f"{group.label} (mean of {len(group.counted)})",
            line={"color": colour, "width": 2.5}, marker={"size": 4}, legendgroup=group.label,
            hovertemplate=f"{html.escape(group.label)} mean<br>{axis} %{{x:.4g}}<br>{metric} %{{y:.4f}}<extra></extra>",
        ))
        for run in group.runs:
            points = [row for row in run.rows if not math.isnan(row.get(metric, math.nan))]  # evaluated
            left_out = "" if run.complete else ", unfinished" + ("" if run in group.counted else ": not in the mean")
            traces.append(_scatter(
                x=[row.get(axis, math.nan) for row in points],
                y=[row[metric] for row in points], mode="lines", name=f"{run.name} (seed {run.seed}{left_out})",
                line={"color": colour, "width": 1, "dash": "dot"}, legendgroup=group.label, visible="legendonly",
                hovertemplate=f"{html.escape(run.name)}<br>{axis} %{{x:.4g}}<br>{metric} %{{y:.4f}}<extra></extra>",
            ))
    xaxis: dict[str, Any] = {"title": {"text": AXIS_TITLES[axis]}}
    if axis == "round":  # rounds are whole numbers: ticks on integers only
        xaxis.update(tickformat="d", dtick=max(1, math.ceil(_last_round(comparison) / 10)))
    if axis in (EPSILON_AXIS, VIRTUAL_AXIS):  # epsilons and heavy-tailed times: orders of magnitude apart
        xaxis.update(type="log")
    layout = {  # the toolbar stands at the right edge, clear of the title (top left) and the legend (below)
        "title": {"text": f"{title(metric, methods(comparison))}<br><sup>vs {AXIS_TITLES[axis]}</sup>", "x": 0.01,
                  "xanchor": "left", "y": 0.98, "yanchor": "top", "font": {"size": 15}},
        "xaxis": xaxis, "yaxis": {"title": {"text": metric}},
        "template": _template(), "height": 520, "margin": {"l": 60, "r": 40, "t": 70, "b": 40},
        "legend": {"font": {"size": 10}, "orientation": "h", "x": 0, "xanchor": "left", "y": -0.18, "yanchor": "top"},
        "modebar": {"orientation": "v"},
    }
    return {"data": traces, "layout": layout}


def _scatter(**properties: Any) -> dict[str, Any]:
    return {"type": "scatter", **properties}


@functools.cache
def _template() -> dict[str, Any]:
    """plotly's ``plotly_white`` template as JSON (a figure written without validation carries it inline)."""
    return pio.templates["plotly_white"].to_plotly_json()


def write_dashboard(comparison: Comparison, table_html: str, path: Path) -> list[str]:
    """Write the dashboard; returns the ids of its figures (one div each)."""
    divs, ids = [], []
    metrics = every_numeric_column(comparison)
    for metric, x_axes in axes(comparison, metrics).items():
        for axis in x_axes:
            div_id = f"fig-{len(ids)}"
            ids.append(div_id)
            divs.append(pio.to_html(figure(comparison, metric, axis), validate=False, full_html=False,
                                    include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG))
    paper = ""
    if comparison.paper is not None:
        source, metric = html.escape(comparison.paper.source), html.escape(comparison.paper.metric)
        paper = f"<p>Paper numbers: {source} ({metric}).</p>"
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>lit-fl: {html.escape(comparison.title)}</title>
<script type="text/javascript">{get_plotlyjs()}</script>
<style>body{{font-family:system-ui,sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}} td:first-child,th:first-child{{text-align:left}}
.grid{{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:12px;margin-top:20px}}</style></head>
<body><h1>lit-fl: {html.escape(comparison.title)}</h1>
<p>{len(comparison.groups)} configurations, {len(comparison.runs)} runs from {html.escape(str(comparison.source))}.
Lines: mean over seeds, band: ± std; click a legend entry to show or hide a configuration's seeds.</p>
{_missing(comparison)}
{paper}{table_html}
<div class="grid">{''.join(f'<div>{d}</div>' for d in divs)}</div>
</body></html>
"""
    atomic_write_text(path, page)
    return ids


def _last_round(comparison: Comparison) -> float:
    return max((run.rows[-1]["round"] for run in comparison.runs if run.rows), default=1.0)


def _missing(comparison: Comparison) -> str:
    """What is not in the means, said at the top of the page: unfinished runs and folders left out."""
    unfinished = [run for group in comparison.groups for run in group.unfinished]
    said = []
    if unfinished:
        names = ", ".join(f"{run.name} (seed {run.seed}, round {int(run.rows[-1]['round'])})" for run in unfinished)
        said.append(f"{len(unfinished)} unfinished run(s), not in the means and statistics: {html.escape(names)}.")
    if comparison.left_out:
        said.append(f"{len(comparison.left_out)} folder(s) left out, listed under Left out.")
    return f'<p class="missing" id="missing"><b>{" ".join(said)}</b></p>' if said else ""


def _alpha(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
