"""The replay page: one self-contained HTML file (inline CSS, inline script, embedded records).

It loads nothing from the network and opens from disk. The records are embedded compactly as
one JSON document; the script draws only the rows in view.
"""

from __future__ import annotations

import json
from html import escape
from importlib import resources
from typing import Any

from controller.viewer.records import RunLedger

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; \
script-src 'unsafe-inline'; img-src data:;{connect}">
<title>{title}</title><style>{css}</style></head>
<body>
<header>
<h1>Run <code id="run-id">{run_id}</code> · <span id="definition">{definition}</span>
 <span id="verification"></span></h1>
<div class="facts">
<span>created <b>{created}</b></span><span>profile <b>{profile}</b></span>
<span>seed <b>{seed}</b></span><span>records <b>{records}</b></span>
<span>readiness <b id="readiness"></b></span><span>dispatch <b id="dispatch"></b></span>
<span>outcome <b id="outcome"></b></span>
</div>
<div class="panels"><table class="usage" id="usage"></table></div>
</header>
<div class="controls" id="filters">
<details><summary>agents &amp; endpoints</summary>
<div class="menu" id="agent-filter"></div></details>
<details><summary>event types</summary><div class="menu" id="type-filter"></div></details>
<input id="search" type="search" placeholder="search records…" aria-label="search records">
<span id="count"></span>
</div>
<div class="heads"><span class="fixed">time · seq · event</span><span id="lane-heads" \
style="display:flex"></span></div>
<div id="viewport"><div id="spacer"></div></div>
<div id="detail" title="click to close"></div>
<script type="application/json" id="ledger-data">{data}</script>
<script>{script}</script>
</body></html>
"""


def _asset(name: str) -> str:
    return resources.files("controller.viewer").joinpath(name).read_text(encoding="utf-8")


def embedded_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``<`` can close it or open a comment."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_page(run: RunLedger, *, live_events: str | None = None) -> str:
    """The page for ``run``; with ``live_events`` (an SSE URL on the same origin) it follows
    the ledger as it grows."""
    manifest = run.manifest
    found = manifest.get("metadata")
    metadata: dict[str, Any] = found if isinstance(found, dict) else {}
    data = {
        "run": {
            "runId": manifest.get("runId"),
            "definitionId": manifest.get("definitionId"),
            "createdAt": manifest.get("createdAt"),
        },
        "verification": run.verification,
        "producers": run.records.producers,
        "tags": run.records.tags,
        "rows": run.records.rows,
        "live": {"events": live_events} if live_events else None,
    }
    return _TEMPLATE.format(
        title=escape(f"replay {manifest.get('runId', '?')}"),
        connect=" connect-src 'self';" if live_events else "",
        css=_asset("replay.css"),
        run_id=escape(str(manifest.get("runId", "?"))),
        definition=escape(str(manifest.get("definitionId", "?"))),
        created=escape(str(manifest.get("createdAt", "?"))),
        profile=escape(str(metadata.get("profile", "?"))),
        seed=escape(str(metadata.get("seed", "?"))),
        records=f"{len(run.records.rows):,}",
        data=embedded_json(data),
        script=_asset("replay.js"),
    )
