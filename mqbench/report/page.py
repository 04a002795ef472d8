"""``--format html``: the whole report as one self-contained page.

Tables, every figure inline as SVG (vector, no external file), and the metadata of each
run (tool version and commit, host, command line, when, and the resolved scenario), so the
page alone says what was measured, where and how. No scripts, no external style sheets,
no network: it opens the same from a CI artifact, an e-mail or a laptop offline.
"""

from __future__ import annotations

import html
import io
import json
import re
from collections.abc import Sequence
from typing import Final

from mqbench.records.run_manifest import RunManifest
from mqbench.report.draw import NamedFigure, print_style
from mqbench.report.render import Table

STYLE: Final = (
    "body{font-family:sans-serif;max-width:72em;margin:1em auto;padding:0 1em}"
    "table{border-collapse:collapse;margin:1em 0}"
    "th,td{border:1px solid #bbb;padding:.2em .6em}td{text-align:right}"
    "td:first-child{text-align:left}.note{font-size:90%;color:#444}"
    "figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}"
    "dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:bold}"
    "pre{background:#f6f6f6;padding:.5em;overflow:auto;font-size:85%}"
)


def svg(fig: NamedFigure) -> str:
    """The figure as an inline ``<svg>`` element (fonts as paths, so it looks the same
    everywhere)."""
    buf = io.StringIO()
    with print_style():
        fig.figure.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    return text[text.index("<svg") :]


def run_metadata(manifest: RunManifest, name: str) -> list[tuple[str, str]]:
    """(key, value) pairs of a run's manifest worth a reader's eye."""
    tool, host = manifest.tool, manifest.host
    memory = host.get("memory_bytes")
    rows = [
        ("run", name),
        ("scenario", manifest.scenario_name),
        ("status", manifest.status),
        ("created (UTC)", str(manifest.created_utc or "?")),
        ("tool", f"{tool.get('name', 'mqbench')} {tool.get('version', '?')}"),
        ("git commit", str(tool.get("git_commit") or "-")),
        ("host", str(host.get("hostname", "?"))),
        ("platform", str(host.get("platform", "?"))),
        ("python", str(host.get("python", "?"))),
        ("CPUs", str(host.get("cpus", "?"))),
        ("memory", f"{memory / 2**30:.1f} GiB" if isinstance(memory, int | float) else "?"),
        ("command line", " ".join(manifest.command_line) or "-"),
        ("cells", str(len(manifest.cells))),
    ]
    return rows


def _table(t: Table) -> list[str]:
    out = [f'<h3 id="tab-{html.escape(t.key)}">{html.escape(t.title)}</h3>', "<table>"]
    out.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in t.header) + "</tr>")
    for row in t.rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    out.append("</table>")
    out += [f'<p class="note">{html.escape(n)}</p>' for n in t.notes]
    return out


def _run(manifest: RunManifest, name: str) -> list[str]:
    out = [f"<h3>Run {html.escape(name)}</h3>", "<dl>"]
    for key, value in run_metadata(manifest, name):
        out.append(f"<dt>{html.escape(key)}</dt><dd>{html.escape(value)}</dd>")
    out.append("</dl>")
    scenario = json.dumps(dict(manifest.scenario), indent=2, sort_keys=True, default=str)
    out.append("<details><summary>resolved scenario</summary>")
    out.append(f"<pre>{html.escape(scenario)}</pre></details>")
    return out


def render_page(
    tables: Sequence[Table],
    preamble: str,
    figures: Sequence[NamedFigure],
    runs: Sequence[tuple[str, RunManifest]],
) -> str:
    """The page: preamble, tables, figures (inline SVG), then each run's metadata.

    ``runs``: (folder name, manifest) of every reported run."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>mqbench report</title>',
        f"<style>{STYLE}</style>",
        "</head><body>",
        "<h1>mqbench report</h1>",
    ]
    out += [f"<p>{html.escape(line)}</p>" for line in preamble.strip().splitlines()[1:] if line]
    out.append("<h2>Tables</h2>")
    for t in tables:
        out += _table(t)
    if figures:
        out.append("<h2>Figures</h2>")
        for fig in figures:
            out.append(f'<figure id="fig-{html.escape(fig.name)}">{svg(fig)}')
            out.append(f"<figcaption>{html.escape(fig.name)}</figcaption></figure>")
    out.append("<h2>Runs</h2>")
    for name, manifest in runs:
        out += _run(manifest, name)
    out.append("</body></html>")
    return "\n".join(out) + "\n"
