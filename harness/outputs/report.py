"""report.html: one self-contained page (images embedded as data URIs, no external files, no
network) with the run's facts, the tables, the plots and the config. Readable offline, mailable."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

import pandas as pd

from harness.config.metrics import on_split
from harness.outputs.columns import chosen_rows
from harness.outputs.html_tables import definition_list, html_table, settings_tables, summary_tables
from harness.outputs.tuning_budget import curve, describe_leaders
from harness.outputs.verdict_text import chosen_on, verdict
from harness.rundir.hardware import describe as describe_machine, several
from harness.rundir.record import MemberRecord, MemberStatus, RunRecord

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1360px; padding: 0 1rem; color: #222; }
h1 { margin-bottom: 0.2rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #ddd; }
.scroll { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.86rem; margin: 0.5rem 0; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th { background: #f4f4f4; } table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[data-order=asc]::after { content: " \\25B2"; } table.sortable th[data-order=desc]::after { content: " \\25BC"; }
td.best { font-weight: bold; background: #eef7ee; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5rem 0; }
pre { background: #f8f8f8; padding: 0.8rem; overflow-x: auto; font-size: 0.8rem; }
details > summary { cursor: pointer; color: #246; margin: 0.5rem 0; }
.facts td { text-align: left; } .facts code { word-break: break-all; } .warning { color: #a40; } #broken { display: none; color: #b00; }
.shared { columns: 3 22rem; font-size: 0.86rem; } .shared div { break-inside: avoid; }
.chart { margin: 1rem 0; } .chart figcaption { font-weight: 600; } .chart small { font-weight: normal; color: #777; }
.chart-area { position: relative; } .chart svg { width: 100%; height: auto; display: block; font-size: 12px; }
.legend { display: flex; flex-wrap: wrap; gap: 0.3rem 0.8rem; margin: 0.3rem 0; }
.legend-item { border: 1px solid #ddd; background: #fff; border-radius: 3px; padding: 0.1rem 0.4rem; cursor: pointer; font: inherit; font-size: 0.82rem; }
.legend-item span { display: inline-block; width: 0.8rem; height: 0.8rem; margin-right: 0.3rem; vertical-align: -0.1rem; }
.legend-item.off { opacity: 0.35; text-decoration: line-through; } .series.hidden { display: none; }
.guide { stroke: #888; stroke-dasharray: 3 3; }
.tip { position: absolute; pointer-events: none; background: rgba(255,255,255,0.95); border: 1px solid #bbb; padding: 0.2rem 0.4rem; font-size: 0.8rem; white-space: nowrap; }
"""

# Sorting, legend toggles, hover values; then the page checks itself (images decoded, charts drawn,
# no horizontal overflow) into attributes of <body> that readers and the browser test can see. With
# #selftest in the address it also clicks a legend entry, hovers a chart and sorts the summary.
_SCRIPT = r"""
var pageErrors = 0;
window.addEventListener('error', function () { pageErrors += 1; });
function sortBy(table, column, th) {
  var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows), up = th.getAttribute('data-order') !== 'asc';
  rows.sort(function (a, b) {
    var x = a.cells[column], y = b.cells[column], xs = x.getAttribute('data-sort'), ys = y.getAttribute('data-sort');
    if (xs !== null && ys !== null) { return up ? xs - ys : ys - xs; }
    if (xs !== null || ys !== null) { return xs !== null ? -1 : 1; }
    return up ? x.textContent.localeCompare(y.textContent) : y.textContent.localeCompare(x.textContent);
  });
  table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('data-order'); });
  th.setAttribute('data-order', up ? 'asc' : 'desc');
  rows.forEach(function (r) { body.appendChild(r); });
}
function toggleModel(model) {
  document.querySelectorAll('.legend-item').forEach(function (b) { if (b.dataset.model === model) { b.classList.toggle('off'); } });
  document.querySelectorAll('.series').forEach(function (g) { if (g.dataset.model === model) { g.classList.toggle('hidden'); } });
}
function nearest(xs, x) {
  var lo = 0, hi = xs.length - 1;
  while (hi - lo > 1) { var mid = (lo + hi) >> 1; if (xs[mid] < x) { lo = mid; } else { hi = mid; } }
  return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
}
function hover(chart, clientX, clientY) {
  var frame = JSON.parse(chart.dataset.chart), data = JSON.parse(chart.querySelector('.chart-data').textContent);
  var svg = chart.querySelector('svg'), tip = chart.querySelector('.tip'), guide = chart.querySelector('.guide');
  var point = svg.createSVGPoint(); point.x = clientX; point.y = clientY;
  var p = point.matrixTransform(svg.getScreenCTM().inverse());
  var x = frame.x0 + (p.x - frame.left) / (frame.right - frame.left) * (frame.x1 - frame.x0), lines = [], at = null;
  Object.keys(data).forEach(function (model) {
    var hidden = false;
    chart.querySelectorAll('.series').forEach(function (g) { if (g.dataset.model === model && g.classList.contains('hidden')) { hidden = true; } });
    var s = data[model]; if (hidden || !s.x.length) { return; }
    var i = nearest(s.x, x); if (at === null) { at = s.x[i]; }
    lines.push(model + ': ' + Number(s.y[i]).toPrecision(4) + (s.x[i] !== at ? ' (' + frame.xLabel + ' ' + s.x[i] + ')' : ''));
  });
  if (!lines.length) { tip.hidden = true; return; }
  tip.textContent = ''; var head = document.createElement('b'); head.textContent = frame.xLabel + ' ' + at; tip.appendChild(head);
  lines.forEach(function (l) { tip.appendChild(document.createElement('br')); tip.appendChild(document.createTextNode(l)); });
  var gx = frame.left + (at - frame.x0) / (frame.x1 - frame.x0) * (frame.right - frame.left);
  guide.setAttribute('x1', gx); guide.setAttribute('x2', gx); guide.setAttribute('visibility', 'visible');
  var box = chart.querySelector('.chart-area').getBoundingClientRect();
  tip.hidden = false; tip.style.left = Math.min(clientX - box.left + 12, box.width - tip.offsetWidth) + 'px'; tip.style.top = (clientY - box.top + 12) + 'px';
}
function selfTest(body) {
  var chart = document.querySelector('.chart'), button = chart && chart.querySelector('.legend-item');
  if (button) {
    toggleModel(button.dataset.model);
    var hidden = Array.prototype.every.call(document.querySelectorAll('.series'), function (g) { return g.dataset.model !== button.dataset.model || getComputedStyle(g).display === 'none'; });
    toggleModel(button.dataset.model);
    body.setAttribute('data-legend-ok', hidden ? 1 : 0);
    var box = chart.querySelector('svg').getBoundingClientRect();
    hover(chart, box.left + box.width / 2, box.top + box.height / 2);
    var tip = chart.querySelector('.tip');
    body.setAttribute('data-hover-ok', !tip.hidden && tip.textContent.indexOf(button.dataset.model) >= 0 ? 1 : 0);
  }
  var table = document.querySelector('table.summary'), heads = table ? table.querySelectorAll('th') : [];
  for (var c = 0; c < heads.length; c++) {
    if (heads[c].textContent !== 'model') { continue; }
    sortBy(table, c, heads[c]);
    var names = Array.prototype.map.call(table.tBodies[0].rows, function (r) { return r.cells[c].textContent; });
    var sorted = names.slice().sort(function (a, b) { return a.localeCompare(b); });
    body.setAttribute('data-sort-ok', names.join('|') === sorted.join('|') ? 1 : 0);
  }
}
window.addEventListener('load', function () {
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('th').forEach(function (th, i) { th.addEventListener('click', function () { sortBy(table, i, th); }); });
  });
  document.querySelectorAll('.legend-item').forEach(function (b) { b.addEventListener('click', function () { toggleModel(b.dataset.model); }); });
  document.querySelectorAll('.chart').forEach(function (chart) {
    var svg = chart.querySelector('svg');
    svg.addEventListener('mousemove', function (e) { hover(chart, e.clientX, e.clientY); });
    svg.addEventListener('mouseleave', function () { chart.querySelector('.tip').hidden = true; chart.querySelector('.guide').setAttribute('visibility', 'hidden'); });
  });
  var body = document.body, images = document.querySelectorAll('img'), ok = 0, charts = document.querySelectorAll('.chart'), drawn = 0;
  images.forEach(function (img) { if (img.complete && img.naturalWidth > 0) { ok += 1; } });
  charts.forEach(function (chart) {  // drawn: a line with a size and a real colour
    var line = chart.querySelector('polyline');
    if (line && line.getBBox().width > 0 && getComputedStyle(line).stroke !== 'none') { drawn += 1; }
  });
  var summary = document.querySelector('table.summary');
  body.setAttribute('data-images', images.length);
  body.setAttribute('data-images-rendered', ok);
  body.setAttribute('data-charts', charts.length);
  body.setAttribute('data-charts-rendered', drawn);
  body.setAttribute('data-page-overflow', document.documentElement.scrollWidth > window.innerWidth ? 1 : 0);
  body.setAttribute('data-summary-overflow', summary && summary.parentNode.scrollWidth > summary.parentNode.clientWidth ? 1 : 0);
  if (ok < images.length || drawn < charts.length) { document.getElementById('broken').style.display = 'block'; }
  if (location.hash === '#selftest') { selfTest(body); }
  body.setAttribute('data-errors', pageErrors);
});
"""


def render_report(
    record: RunRecord,
    config_yaml: str,
    summary: pd.DataFrame,
    pairs: pd.DataFrame,
    plots: list[Path],
    rank_by: str,
    extra_sections: list[tuple[str, str]] | None = None,
    charts: list[str] | None = None,
    has_test: bool = False,
    choices: tuple[str, ...] = (),
) -> str:
    title = f"{record.name or 'run'} / {record.run_id}"
    main, rest = summary_tables(summary, rank_by)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style><script>{_SCRIPT}</script></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>status <b>{html.escape(str(record.status))}</b> &middot; ranked by <b>{html.escape(rank_by)}</b> "
        "&middot; click a column's header to sort by it</p>",
        "<p id='broken'>Some plots of this report failed to render.</p>",
        "<h2>Summary</h2>",
        html_table(main, highlight=rank_by, css="summary"),
        f"<p class='verdict'>{html.escape(verdict(pairs, rank_by, summary))}</p>",
        f"<p class='verdict'>{html.escape(chosen_on(summary, rank_by, record.chose_any_weights(), has_test, choices))}</p>",
        f"<details><summary>All {len(rest.columns) - 1} other columns of summary.csv</summary>{html_table(rest)}</details>",
    ]
    for warning in record.warnings:
        parts.append(f"<p class='warning'>warning: {html.escape(warning)}</p>")
    parts += _pairs_section(pairs)
    parts.append("<h2>Curves</h2>")
    parts += charts or []
    parts.append("<h2>Plots</h2>")
    parts += [_image(plot) for plot in plots] or ["<p>No plots: this run drew none (<code>output.plot_formats: []</code>), or its plots/ folder has no PNG.</p>"]
    for heading, body in extra_sections or []:
        parts += [f"<h2>{html.escape(heading)}</h2>", body]
    settings, shared = settings_tables(record.config or {})
    parts += ["<h2>Settings</h2>"]
    if len(settings.columns) > 1:
        parts += ["<p>What differs between the models:</p>", html_table(settings)]
    parts += ["<p>Shared by every model (and the run's train and data settings):</p>", definition_list(shared),
              f"<details><summary>config.yaml, as run</summary><pre>{html.escape(config_yaml)}</pre></details>",
              "<h2>Run</h2>", _facts(record.to_dict()), "</body></html>"]
    return "\n".join(parts)


def render_group_section(summary: pd.DataFrame, pairs: pd.DataFrame, rank_by: str, budget: pd.DataFrame | None = None) -> str:
    """The model each group chose on validation, its validation and test scores, the verdict
    between the chosen ones, and each group's expected best by tuning budget."""
    if "chosen_in_group" not in summary:
        return "<p>No group verdicts were written.</p>"
    columns = ["compare_group", "model", on_split(rank_by, "selected_val"), rank_by, f"{rank_by}_low", f"{rank_by}_high"]
    chosen = chosen_rows(summary)[[c for c in dict.fromkeys(columns) if c in summary]]
    parts = [html_table(chosen)]
    if unchosen := [g for g in dict.fromkeys(summary["compare_group"].dropna()) if g not in set(chosen["compare_group"])]:
        parts.append(f"<p>No model finished in {html.escape(', '.join(unchosen))}: nothing chosen there (each of its trials is in the tuning budget below).</p>")
    if len(pairs):
        parts.append(f"<p class='verdict'>{html.escape(verdict(pairs, rank_by, table='compare_by.csv'))}</p>")
    if budget is not None and len(budget):
        parts.append(render_budget(budget))
    return "\n".join(parts)


def render_budget(budget: pd.DataFrame) -> str:
    """Expected best by number of trials, a column per group (mean ± standard deviation), and
    which group is ahead at which budget."""
    value, metric, what = curve(budget)
    cells = budget.assign(cell=[f"{m:.4f} ± {s:.4f}" for m, s in zip(budget[value], budget[f"{value}_std"])])
    table = cells.pivot(index="trials", columns="group", values="cell").fillna("")
    table = table[list(dict.fromkeys(budget["group"]))].reset_index()
    parts = [f"<p>Tuning budget (Dodge et al. 2019; the unbiased estimator of Tang et al. 2020): the {html.escape(what)} "
             f"({html.escape(metric)}) when a group gets k of the models it tried, drawn at random; at k = all of them it is "
             "the one the group chose. The best of more trials is higher by chance alone, so compare "
             "groups at the same k (expected_best.csv; ± one standard deviation over the draws: the spread of what a search of "
             "that size gets, not an interval of the estimate).</p>", html_table(table)]
    if leading := describe_leaders(budget):
        parts.append(f"<p class='verdict'>{html.escape(leading)}</p>")
    return "\n".join(parts)


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


def render_departures_section(models: dict[str, MemberRecord], race: dict[str, Any] | None) -> str:
    """Members that left before the end: where, and why."""
    rung_at = {r["step"]: r for r in (race or {}).get("rungs", [])}
    reasons = {"stopped": "early stopping", "diverged": "a loss or gradient that was not finite", "oom": "out of memory"}
    items = []
    for name, record in models.items():
        status, step = str(record.status), record.changed_at_step
        if record.status == MemberStatus.OK:
            continue
        rung = rung_at.get(step)
        why = f"race rung {rung['rung']} (epoch {rung['epoch']})" if record.status == MemberStatus.DROPPED and rung else reasons.get(status, status)
        items.append(f"<li><b>{html.escape(name)}</b> {html.escape(status)} at step {step}: {html.escape(why)}</li>")
    if not items:
        return ""
    return "<p>In the plots, a cross ends each of their curves.</p><ul>" + "".join(items) + "</ul>"


def render_race_section(race: dict[str, Any]) -> str:
    """Each rung's ranking and cut, then whether the rungs' rankings predicted the final one."""
    switched = any(rung.get("retraced") is False for rung in race.get("rungs", []))
    how = ("the dropped members were switched off in the fused step (no new trace)" if switched
           else "the fused step was rebuilt without the dropped members")
    parts = [f"<p>Successive halving by <b>{html.escape(race['metric'])}</b>, keeping {race['keep']:g} of the models at "
             f"each rung (epochs {', '.join(map(str, race['rung_epochs']))}); after each rung {how}.</p>"]
    for rung in race.get("rungs", []):
        frame = pd.DataFrame(rung["ranking"]).rename(columns={"value": race["metric"]})
        frame["kept"] = frame["kept"].map({True: "kept", False: "dropped"})
        cost = f"; the rebuilt step's first call (tracing it) took {rung['first_call_s']:.2f} s" if rung.get("first_call_s") is not None else ""
        parts += [f"<h3>rung {rung['rung']} (epoch {rung['epoch']}, step {rung['step']})</h3>",
                  f"<p>{rung['members_after']} member(s) kept{cost}.</p>", _table(frame[["rank", "model", race["metric"], "kept"]])]
    correlations = race.get("correlations")
    if correlations:
        frame = pd.DataFrame(correlations)
        parts += ["<h3>Did the rungs predict the final ranking?</h3>",
                  "<p>Spearman's rank correlation between each rung's ranking and the final ranking, over the models "
                  "that finished (1: the same order; 0: unrelated). Early rankings often do not predict final ones "
                  "(Zela et al. 2018, arXiv:1807.06906): the nightly history keeps these figures night after night.</p>",
                  _table(frame)]
    return "\n".join(parts)


def _table(frame: pd.DataFrame) -> str:
    return html_table(frame)


def _pairs_section(pairs: pd.DataFrame) -> list[str]:
    if not len(pairs):
        return []
    return [
        "<h2>Pairs, on the same batches</h2>",
        "<p>On the common loss (compared_on): mean_loss_diff = train loss of model_a minus model_b, "
        "averaged over steps; a_beats_b = share of steps where model_a's loss was lower on the very same "
        "batch. On the ranking metric: diff = model_a minus model_b with its 95% interval (diff_low, "
        "diff_high); covers = the noise that interval accounts for. With one training seed it is a "
        "paired bootstrap over validation images (p_a_better: the share of resamples in which model_a "
        "was better; beyond_image_noise: the interval excludes zero), which says nothing about training "
        "randomness, so no pair is supported. With repeats it is the mean over seeds of the per-seed "
        "differences, its interval covering seed-to-seed variation and image noise (seed_std, image_se, "
        "p_t; p_holm: Holm-adjusted over all pairs); supported = p_holm below 0.05; repeats_to_resolve = "
        "the fewest repeats whose run would support the difference 4 times in 5 if the truth is as uncertain as "
        "these seeds say (inf: no number is likely to; resolve_limit says why: images = image noise alone hides "
        "the difference, seeds = what the seeds measured does, zero = a mean difference of exactly zero); a guess, often optimistic from a few seeds. "
        "With output.equivalence_margin: p_equivalent = two one-sided tests that the difference is inside the margin, Holm-adjusted; "
        "equivalent = p_equivalent below 0.05 (not supported means uncertain; equivalent means small).</p>",
        html_table(pairs),
    ]


FACT_LABELS = {
    "started": "started", "ended": "ended", "total_steps": "steps planned", "steps_done": "steps done",
    "deterministic": "deterministic", "config_fingerprint": "config fingerprint", "trace_count": "traces of the fused step",
    "eval_trace_count": "traces of the eval function",
    "timing": "timing", "versions": "versions", "devices": "devices", "hardware": "machine (whose timings these are)", "placement": "placement",
    "resumes": "resumes",
}


def _facts(info: dict[str, Any]) -> str:
    """The run's facts as a reader wants them: each a labelled line, nested ones as `key: value`
    lists, not JSON."""
    rows = "".join(
        f"<tr><td>{html.escape(label)}</td><td>{_fact_value(info[key])}</td></tr>"
        for key, label in FACT_LABELS.items()
        if key in info and info[key] not in (None, [], {})
    )
    return f"<table class='facts'>{rows}</table>"


def _fact_value(value: Any) -> str:
    """A fact's top level one item per line (`key: value`); anything nested inline. A run whose
    groups ran on several machines: each machine on its line (its groups' entries say which ran where)."""
    if several(value):
        return "<br>".join(html.escape(describe_machine(m)) for m in value["machines"])
    if isinstance(value, dict):
        return "<br>".join(f"{html.escape(_label(k))}: {html.escape(_plain(v))}" for k, v in value.items())
    if isinstance(value, list):
        return "<br>".join(html.escape(_plain(v)) for v in value)
    return html.escape(_plain(value))


def _label(key: Any) -> str:
    return str(key).replace("_", " ")


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{_label(k)} {_plain(v)}" for k, v in value.items())
    return str(value)
