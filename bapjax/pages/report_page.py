"""A run's predictions as one self-contained HTML page: item table, dialogue, 3D view (its
command: `python -m bapjax.report`).

``DIR/index.html`` opens from disk (no server, no network): the page's script, its styles, the
vendored three.js bundle (``report_assets/``, npm ``three@THREE_VERSION``, MIT) and the data are
inlined. Every per-item figure comes from the evaluator (``evaluate.evaluate_items`` and
``evaluate.per_item_records``); this module only arranges them. The matched / missed / extra marks
are the evaluator's exact matches after its fairer alignment: a predicted net action is
matched when the alignment maps it onto a reference net action, so an item shows
``2 * matched / (n_pred + n_ref)`` = its Overall (fairer) F1.

Embedded data (``<script id="report-data" type="application/json">``)::

    {"meta": {title, split, items_source, predictions_source, created, three,
              partial: null, or {first, of} when --limit shows the first of the split's items},
     "summary": {"micro", "macro", "strict_micro", "counts"},      # the evaluator's report
     "histories": [[event, ...], ...],   # per game, shared by its items: ["A"|"B", text] or
                                         # [type, color, x, y, z] (an earlier Builder action)
     "items": [{"id", "g": "EB"|"NEB", "m": in M (fairer alignment), "h": [history, length],
                "lr"/"lp": recorded / predicted sequence lengths, "nr"/"np": net set sizes,
                "f": {overall, type, color, location, shape, strict}, "al": [r, dx, dz],
                "pose": [x, y, z, yaw, pitch], "prev": [[x, y, z, color], ...],
                "ref"/"pred": [[type, color, x, y, z, matched], ...]}]}   # net actions, sorted
"""

from __future__ import annotations

import datetime
import html
import json
import re
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

from bapjax import paths
from bapjax.corpus import load
from bapjax.errors import UserError
from bapjax.evaluation import evaluator, metrics
from bapjax.pages import browser
from bapjax.world import jsonl
from bapjax.world.grid import Action
from bapjax.world.items import BapItem, ChatTurn

THREE_VERSION = "0.187.0"
ASSETS = Path(__file__).resolve().parent / "report_assets"
ASSET_FILES = ("report.css", "region3d.js", "report.js", f"three-{THREE_VERSION}.min.js", "three-LICENSE.txt")
# JavaScript conditions on a page being open: its table and first item's dialogue are built
# (synchronously, while it loads), and its 3D view has drawn (after the first paint).
PAGE_OPEN = "window.bapjaxReport && window.bapjaxReport.times.open"
VIEW_DRAWN = "window.bapjaxReport && window.bapjaxReport.times.frame"


class ReportError(UserError):
    """A report that cannot be made from what was given; names the flag or file."""


# --------------------------------------------------------------------------------------------
# Data


def mark_matches(pred_net, ref_net, fair_index: int):
    """(pred, ref) net actions sorted, each with True where the evaluator counts it as an exact
    match after the fairer alignment ``fair_index`` (``metrics.align_action``)."""
    aligned = {a: tuple(metrics.align_action(Action(*a), fair_index)) for a in pred_net}
    hits = set(aligned.values()) & {tuple(h) for h in ref_net}
    pred = [(tuple(a), aligned[a] in hits) for a in sorted(pred_net)]
    ref = [(tuple(h), tuple(h) in hits) for h in sorted(ref_net)]
    return pred, ref


def _event(event) -> list:
    if isinstance(event, ChatTurn):
        return ["A" if event.speaker.lower().startswith("arch") else "B", event.text]
    return [int(v) for v in event]


def _shared_histories(items: Sequence[BapItem]) -> tuple[list[list], list[tuple[int, int]]]:
    """The items' histories stored once per game: an item's history is mostly a prefix of the
    game's longest one. Returns (histories, (history index, length) per item)."""
    histories: list[list] = []
    by_game: dict[str, list[int]] = {}
    refs: list[tuple[int, int]] = [(0, 0)] * len(items)
    for n in sorted(range(len(items)), key=lambda n: -len(items[n].history)):
        events = [_event(e) for e in items[n].history]
        for h in by_game.setdefault(items[n].game_id, []):
            if histories[h][:len(events)] == events:
                refs[n] = (h, len(events))
                break
        else:
            by_game[items[n].game_id].append(len(histories))
            refs[n] = (len(histories), len(events))
            histories.append(events)
    return histories, refs


def report_data(items: Sequence[BapItem], predictions: Mapping[str, Sequence[Action]], *,
                title: str, items_source: str, predictions_source: str, split: str | None = None,
                allow_missing: bool = False, drop_infeasible: bool = False,
                partial: Mapping | None = None) -> dict:
    """The page's data: the evaluator's report and per-item records, with what the view draws.
    ``partial``: {first, of} when the items are the first of a split's (--limit)."""
    report, scores, details = evaluator.evaluate_items(items, predictions, drop_infeasible=drop_infeasible,
                                                      allow_missing=allow_missing)
    histories, history_refs = _shared_histories(items)
    records = []
    for n, (item, record) in enumerate(zip(items, evaluator.per_item_records(items, scores, details))):
        pred, ref = mark_matches(details["pred_sets"][n], details["ref_sets"][n], int(scores.fair_index[n]))
        pose = item.builder_pose
        records.append({
            "id": record["item_id"], "g": record["group"], "m": int(record["multiple"]),
            "h": list(history_refs[n]),
            "lr": len(item.reference_actions), "lp": len(predictions.get(item.item_id, ())),
            "nr": record["n_ref"], "np": record["n_pred"],
            "f": {m: record[m] for m in metrics.METRIC_NAMES + ("strict",)},
            "al": record["fair_alignment"],
            "pose": [round(float(v), 2) for v in (pose.x, pose.y, pose.z, pose.yaw, pose.pitch)],
            "prev": [[int(b[0]), int(b[1]), int(b[2]), int(b[3])] for b in item.prev_structure],
            "ref": [[int(v) for v in a] + [int(hit)] for a, hit in ref],
            "pred": [[int(v) for v in a] + [int(hit)] for a, hit in pred],
        })
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return {
        "meta": {"title": title, "split": split, "items_source": items_source,
                 "predictions_source": predictions_source, "created": created, "three": THREE_VERSION,
                 "partial": dict(partial) if partial else None},
        "summary": {key: report[key] for key in ("micro", "macro", "strict_micro", "counts")},
        "histories": histories,
        "items": records,
    }


# --------------------------------------------------------------------------------------------
# Page

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bapjax report</title>
<style>@@css@@</style>
</head><body>
<header><h1 id="title"></h1><span class="meta" id="meta"></span><span class="scores" id="scores"></span></header>
<main>
<section id="list">
<div id="filters">
<label>group <select id="f-group"><option value="">all</option><option>EB</option><option>NEB</option></select></label>
<label>F1 % <input id="f-f1min" type="number" min="0" max="100" step="any" placeholder="min"> to
<input id="f-f1max" type="number" min="0" max="100" step="any" placeholder="max"></label>
<label>ref. length <input id="f-lenmin" type="number" min="0" step="1" placeholder="min"> to
<input id="f-lenmax" type="number" min="0" step="1" placeholder="max"></label>
<label>dialogue <input id="f-text" type="search" placeholder="search text"></label>
<button id="f-reset" type="button">reset</button>
<span id="count"></span>
</div>
<div id="tablewrap"><table>
<thead><tr><th data-key="id" title="item id: game:index">item</th><th data-key="g" title="empty board (EB) or not (NEB)">group</th>
<th data-key="nr" title="reference net actions">ref</th><th data-key="np" title="predicted net actions">pred</th>
<th data-key="overall" title="fairer F1 (Overall)">F1</th><th data-key="type">Type</th><th data-key="color">Color</th>
<th data-key="location" title="Location F1">Loc.</th><th data-key="shape">Shape</th></tr></thead>
<tbody id="rows"></tbody></table></div>
</section>
<section id="view">
<div id="itemhead"></div>
<div id="scenewrap"><canvas id="scene"></canvas><div id="labels"></div><div id="scene-wait">3D view: starting WebGL&hellip;</div>
<div id="legend"><span class="sw" style="border-color:#1a9e3f;background:#9ad0a7"></span>matched
<span class="sw" style="border-color:#1f5fd6;background:#dbe6fb"></span>missed (reference only)
<span class="sw" style="border-color:#d92020;background:#f3a3a3"></span>extra (prediction only)<br>
solid: placement &middot; wire box with a cross: removal &middot; pale: the structure before</div>
<div id="scenebtns"><label id="aligned-box" title="draw the prediction turned and shifted as the evaluator aligned it">
<input id="aligned" type="checkbox" checked> aligned</label>
<button id="view-reset" type="button" title="camera behind the Builder">Builder view</button>
<button id="view-top" type="button">top</button></div>
<div id="scenehelp">drag: rotate &middot; wheel: zoom &middot; right-drag: pan &middot; &uarr;/&darr; or j/k: previous/next item</div>
</div>
<div id="bottom"><div id="dialogue"></div><div id="actions"></div></div>
</section>
</main>
<footer><span id="opened"></span> &middot; bapjax report &middot; three.js r@@three_revision@@ (MIT license, below)</footer>
<pre id="selftest-result"></pre>
<script type="application/json" id="report-data">@@data@@</script>
<script>@@three@@</script>
<script>@@region3d@@</script>
<script>@@app@@</script>
<!-- three.js license:
@@three_license@@
-->
</body></html>
"""


def _asset(name: str) -> str:
    path = ASSETS / name
    if not path.is_file():
        raise ReportError(f"{path}: a report asset is missing (reinstall bapjax: pip install -e .)")
    return path.read_text(encoding="utf-8")


def _inline_script(text: str) -> str:
    """Script text that cannot end its <script> element early."""
    return text.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def render_html(data: Mapping) -> str:
    # "<" escaped as \\u003c inside the JSON: no "</script>" or "<!--" can appear in it.
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    parts = {
        "css": _asset("report.css"), "data": payload,
        "three": _inline_script(_asset(f"three-{THREE_VERSION}.min.js")), "region3d": _inline_script(_asset("region3d.js")),
        "app": _inline_script(_asset("report.js")),
        "three_revision": THREE_VERSION.split(".")[1], "three_license": _asset("three-LICENSE.txt").replace("--", "- -"),
    }
    # One pass over the template: inserted text is never scanned for markers.
    return re.sub(r"@@(\w+)@@", lambda m: parts[m.group(1)], _PAGE)


def read_embedded_data(html: str) -> dict:
    """The data of a written page (tests, and anyone post-processing a report)."""
    start_tag = '<script type="application/json" id="report-data">'
    start = html.index(start_tag) + len(start_tag)
    return json.loads(html[start:html.index("</script>", start)])


def selftest(page, query: str = "red") -> dict:
    """Opens ``page`` in headless Chromium (``bapjax.pages.browser``) with ``?selftest&q=query``: the page
    selects an item, reads its 3D canvas, tries the filters, sorting and the next-item key, and
    writes what it saw (with its open timings) as JSON, returned here."""
    dom = browser.dump_dom(browser.file_url(page, query=f"selftest&q={query}"))
    found = re.search(r'<pre id="selftest-result">(.*?)</pre>', dom, re.S)
    if not found or not found.group(1):
        raise RuntimeError(f"{page}: the page's self-test wrote nothing")
    return json.loads(html.unescape(found.group(1)))


def write_report(out_dir, data: Mapping) -> Path:
    """Writes ``out_dir/index.html`` (the folder is created; other files in it are left alone)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out_dir}: a file, not a folder")
    out.mkdir(exist_ok=True)
    page = out / "index.html"
    page.write_text(render_html(data), encoding="utf-8")
    return page


# --------------------------------------------------------------------------------------------
# The page of a split: `python -m bapjax.report` (also `python -m bapjax.viz report`)

def check_flags(out: str | None, checkpoint: str | None, predictions: str | None, limit: int,
                batch_size: int) -> None:
    """Flag values checked before anything is loaded."""
    if not out:
        raise ReportError("report needs --out DIR (the folder index.html is written to)")
    if bool(checkpoint) == bool(predictions):
        raise ReportError("report needs exactly one of --checkpoint RUN or --predictions FILE")
    target = Path(out).expanduser()
    if target.exists() and not target.is_dir():
        raise ReportError(f"--out {out}: a file, not a folder")
    if target.is_dir():
        paths.check_writable_dir(target, "--out")
    else:  # made when the page is written: its parent must exist and take a folder now
        paths.check_output_file(out, "--out")
    load.check_limit(limit)
    if batch_size < 1:
        raise ReportError(f"--batch_size is {batch_size}; expected an integer >= 1")
    if predictions and not Path(predictions).is_file():
        raise ReportError(f"--predictions {predictions}: no such file")


def make_report(*, out: str, checkpoint: str | None = None, predictions: str | None = None,
                corpus: str | None = None, store: str | None = None, items_file: str | None = None,
                split: str | None = None, dataset: str | None = None, limit: int = 0, batch_size: int = 64,
                allow_missing: bool = False, drop_infeasible: bool = False) -> Path:
    """Load the items, predict (``--checkpoint``) or read the predictions, evaluate, write."""
    start = time.perf_counter()
    check_flags(out, checkpoint, predictions, limit, batch_size)
    every = load.items_from_flags(corpus, split, items_file, store, dataset)
    given = [("--corpus", corpus), ("--store", store), ("--items", items_file)]
    items_source = " ".join(f"{flag} {value}" for flag, value in given if value)
    if split and not items_file:
        items_source += f" --split {split}"
    items = load.first_items(every, limit)
    partial = {"first": len(items), "of": len(every)} if len(items) < len(every) else None
    ignored = 0
    if predictions:
        predicted = jsonl.read_predictions(predictions)
        known = {item.item_id for item in every}
        unknown = [item_id for item_id in predicted if item_id not in known]
        if unknown:
            raise ReportError(f"--predictions {predictions}: {len(unknown)} item id(s) are not among the "
                              f"{len(every)} items of {items_source}, e.g. {unknown[0]!r}")
        predicted, ignored = load.without_later_items(predicted, every, items)
        predictions_source = f"--predictions {predictions}"
    note = f" (--limit {limit}; {ignored} prediction(s) of later items ignored)" if predictions and limit else ""
    print(f"report: {len(items)} of {len(every)} items from {items_source}{note}", file=sys.stderr, flush=True)
    if not predictions:
        from bapjax.training import run_eval  # loads the model code only when a checkpoint is decoded

        predicted, settings = run_eval.predict_with_run(checkpoint, items, slots=batch_size)
        predictions_source = f"--checkpoint {checkpoint} ({settings.describe()})"
    if partial:
        items_source += f" --limit {limit}"
    title = f"bapjax report: {Path(checkpoint or predictions).name}" + (f" on {split}" if split else "")
    if partial:
        title += f" (partial: the first {partial['first']} of {partial['of']} items)"
    data = report_data(items, predicted, title=title, items_source=items_source,
                       predictions_source=predictions_source, split=split, allow_missing=allow_missing,
                       drop_infeasible=drop_infeasible, partial=partial)
    try:
        page = write_report(out, data)
    except OSError as err:
        raise ReportError(f"--out {out}: {err}") from None
    micro = data["summary"]["micro"]["Overall"]["overall"]
    shown = f"{len(items)} items" + (f" (partial: the first {len(items)} of {len(every)})" if partial else "")
    print(f"wrote {page} ({page.stat().st_size / 1e6:.1f} MB, {shown}, micro fairer F1 "
          f"{100 * micro:.1f}) in {time.perf_counter() - start:.1f} s", flush=True)
    return page
