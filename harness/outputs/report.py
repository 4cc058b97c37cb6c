"""report.html: one self-contained page (images embedded as data URIs, no external files, no
network) with the run's facts, the tables, the plots and the config. Readable offline, mailable."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

import pandas as pd

from harness.outputs.columns import format_cell, higher_is_better

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1150px; color: #222; }
h1 { margin-bottom: 0.2rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.88rem; margin: 0.5rem 0; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
td.best { font-weight: bold; background: #eef7ee; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5rem 0; }
pre { background: #f8f8f8; padding: 0.8rem; overflow-x: auto; font-size: 0.8rem; }
.facts td { text-align: left; } .warning { color: #a40; } #broken { display: none; color: #b00; }
"""

# Marks the page when an image fails to decode, for readers and for the test that opens the page.
_SCRIPT = """
window.addEventListener('load', function () {
  var images = document.querySelectorAll('img'), ok = 0;
  images.forEach(function (img) { if (img.complete && img.naturalWidth > 0) ok += 1; });
  document.body.setAttribute('data-images', images.length);
  document.body.setAttribute('data-images-rendered', ok);
  if (ok < images.length) { document.getElementById('broken').style.display = 'block'; }
});
"""


def render_report(
    info: dict[str, Any],
    config_yaml: str,
    summary: pd.DataFrame,
    pairs: pd.DataFrame,
    plots: list[Path],
    rank_by: str,
    extra_sections: list[tuple[str, str]] | None = None,
) -> str:
    title = f"{info.get('name', 'run')} / {info.get('run_id', '')}"
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style><script>{_SCRIPT}</script></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>status <b>{html.escape(str(info.get('status')))}</b> &middot; ranked by <b>{html.escape(rank_by)}</b></p>",
        "<p id='broken'>Some images of this report failed to render.</p>",
        "<h2>Summary</h2>",
        _table(summary, highlight=rank_by),
        f"<p class='verdict'>{html.escape(verdict(pairs, rank_by))}</p>",
    ]
    for warning in info.get("warnings") or []:
        parts.append(f"<p class='warning'>warning: {html.escape(warning)}</p>")
    if len(pairs):
        parts += [
            "<h2>Pairs, on the same batches</h2>",
            "<p>On the common loss (compared_on): mean_loss_diff = train loss of model_a minus model_b, "
            "averaged over steps; a_beats_b = share of steps where model_a's loss was lower on the very same "
            "batch. On the ranking metric: diff = model_a minus model_b with its 95% interval (diff_low, "
            "diff_high): a paired bootstrap over validation images with one seed (p_a_better: the share of "
            "resamples in which model_a was better), a paired t-test across seeds with repeats (p_holm: "
            "Holm-adjusted over all pairs); supported = the difference is unlikely to be noise.</p>",
            _table(pairs),
        ]
    parts.append("<h2>Plots</h2>")
    parts += [_image(plot) for plot in plots]
    for heading, body in extra_sections or []:
        parts += [f"<h2>{html.escape(heading)}</h2>", body]
    parts += ["<h2>Run</h2>", _facts(info), "<h2>Config</h2>", f"<pre>{html.escape(config_yaml)}</pre>", "</body></html>"]
    return "\n".join(parts)


def verdict(pairs: pd.DataFrame, rank_by: str) -> str:
    """One sentence: which differences in the ranking metric the data supports, and which not."""
    if "supported" not in pairs or pairs["supported"].isna().all():
        return f"No interval for {rank_by}: the ranking by it comes with no statement of how sure it is."
    supported, unsupported = [], []
    for row in pairs.dropna(subset=["supported"]).itertuples(index=False):
        a_better = (row.diff > 0) == higher_is_better(rank_by)
        better, worse = (row.model_a, row.model_b) if a_better else (row.model_b, row.model_a)
        diff, low, high = (row.diff, row.diff_low, row.diff_high) if a_better else (-row.diff, -row.diff_high, -row.diff_low)
        text = f"{better} over {worse} ({diff:+.4f} [{low:+.4f}, {high:+.4f}])"  # better minus worse
        (supported if row.supported else unsupported).append(text)
    parts = [f"Supported differences in {rank_by} (95%): {'; '.join(supported)}." if supported else f"No difference in {rank_by} is supported at 95%."]
    if unsupported:
        parts.append(f"Not supported (could be noise): {'; '.join(unsupported)}.")
    return " ".join(parts)


def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<div><img alt='{html.escape(path.stem)}' src='data:image/png;base64,{data}'></div>"


def render_nightly_section(nightly: dict[str, Any], run_path: Path) -> str:
    """What changed since the previous night and the baseline (nightly.json), and the trends."""
    count = nightly.get("regressions", 0)
    verdict = f"<b class='warning'>{count} regression(s)</b>" if count else "<b>no regression</b>"
    parts = [
        f"<p>night of {html.escape(str(nightly.get('night')))}: {verdict}; previous run "
        f"<code>{html.escape(str(nightly.get('previous') or '-'))}</code>, baseline "
        f"<code>{html.escape(str(nightly.get('baseline') or '-'))}</code>.</p>"
    ]
    changes = pd.DataFrame(nightly.get("changes") or [])
    if len(changes):
        changes["verdict"] = ["REGRESSION" if r else "ok" for r in changes["regressed"]]
        parts.append(_table(changes[["against", "against_run", "model", "metric", "before", "now", "worse_by", "allowed", "verdict", "note"]]))
    parts += [f"<p>{html.escape(note)}</p>" for note in nightly.get("notes") or []]
    parts += [_image(run_path / p) for p in nightly.get("trend_plots") or [] if (run_path / p).exists()]
    return "\n".join(parts)


GROUP_COLUMNS = ("name", "members", "device", "status", "attempts", "planned_mb", "peak_rss_mb", "started", "ended", "split_into", "error")


def render_groups_section(groups: list[dict[str, Any]]) -> str:
    """A run of several groups: which members trained together, where, how it went."""
    frame = pd.DataFrame([{c: ", ".join(g[c]) if isinstance(g.get(c), list) else g.get(c) for c in GROUP_COLUMNS} for g in groups])
    frame = frame.dropna(axis="columns", how="all")
    note = "<p>Each group trained as one fused step in a process of its own, on the same batches as every other group.</p>"
    return note + _table(frame)


def _table(frame: pd.DataFrame, highlight: str | None = None) -> str:
    best_row = None
    if highlight and highlight in frame and frame[highlight].notna().any():
        values = frame[highlight].astype(float)
        best_row = values.idxmax() if higher_is_better(highlight) else values.idxmin()
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for index, row in frame.iterrows():
        cells = []
        for column, value in row.items():
            css = " class='best'" if index == best_row and column in ("model", highlight) else ""
            cells.append(f"<td{css}>{html.escape(format_cell(value))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"




def _facts(info: dict[str, Any]) -> str:
    keys = ["started", "ended", "total_steps", "steps_done", "deterministic", "config_fingerprint", "trace_count", "timing", "versions", "devices", "placement", "resumes"]
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td><code>{html.escape(json.dumps(info.get(k), default=str))}</code></td></tr>"
        for k in keys
        if k in info
    )
    return f"<table class='facts'>{rows}</table>"
