"""The replay page: one self-contained HTML file (inline CSS, inline script, embedded records).

It loads nothing from the network and opens from disk. The records are embedded compactly as
one JSON document; the script draws only the rows in view.
"""

from __future__ import annotations

import json
import re
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


_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
"""In a Python string every code point in this range is unpaired: UTF-8 cannot encode it, and a
failed ledger, shown as found, may hold one (a JSON ``\\ud800`` escape)."""


def embedded_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``<`` can close it or open a comment, and a
    lone surrogate stays the escape it was (the page is UTF-8 and holds only encodable text)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return _LONE_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def _text(value: object) -> str:
    """``value`` as HTML text; a lone surrogate becomes U+FFFD, as an HTML parser makes it."""
    return _LONE_SURROGATE.sub("\ufffd", escape(str(value)))


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
        title=_text(f"replay {manifest.get('runId', '?')}"),
        connect=" connect-src 'self';" if live_events else "",
        css=_asset("replay.css"),
        run_id=_text(manifest.get("runId", "?")),
        definition=_text(manifest.get("definitionId", "?")),
        created=_text(manifest.get("createdAt", "?")),
        profile=_text(metadata.get("profile", "?")),
        seed=_text(metadata.get("seed", "?")),
        records=f"{len(run.records.rows):,}",
        data=embedded_json(data),
        script=_asset("replay.js"),
    )
