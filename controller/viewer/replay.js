"use strict";
// The replay page: lanes per agent and endpoint, messages as arrows with latency, link faults,
// readiness, dispatch, outcome, usage and verification. Rows are rendered lazily (only those in
// view), so a 100,000-record ledger stays usable. In live mode new records arrive by SSE.
(function () {
  const DATA = JSON.parse(document.getElementById("ledger-data").textContent);
  const ROW = 22, LANE = 96, OVERSCAN = 20;
  const tags = DATA.tags, producers = DATA.producers, rows = [];
  const lanes = [], laneOf = new Map();
  const conversations = new Map(), messages = new Map();
  const downSpans = [], openDown = new Map();
  const usage = new Map(), agents = new Map();
  const summary = { readiness: null, dispatch: null, outcome: null };
  const involved = [];   // per row: lane indexes it touches
  const kinds = [];      // per row: css class
  let visible = [], searchText = [], query = "";
  const hiddenTags = new Set(), hiddenLanes = new Set();

  const short = (tag) => tag.replace(/^society\./, "").replace(/\/v\d+$/, "");
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const ms = (us) => (us / 1000).toFixed(us < 10000 ? 2 : 1) + " ms";
  const offset = (us) => "+" + (us / 1e6).toFixed(3) + "s";

  function lane(id) {
    if (!id) return -1;
    let i = laneOf.get(id);
    if (i === undefined) { i = lanes.length; lanes.push(id); laneOf.set(id, i); }
    return i;
  }
  function agentState(name) {
    let a = agents.get(name);
    if (!a) { a = { state: "admitted" }; agents.set(name, a); }
    return a;
  }

  function ingest(row) {
    const index = rows.length;
    rows.push(row);
    const tag = tags[row[3]], e = row[4], t = row[1];
    let touch = [], kind = "";
    switch (tag) {
      case "society.run-started/v1":
        (e.roster || []).forEach((name) => { lane("agent:" + name); agentState(name); });
        kind = "milestone"; break;
      case "society.endpoint-opened/v1": touch = [lane(e.endpointId)]; break;
      case "society.conversation-opened/v1":
        conversations.set(e.conversationId, e.participants || []);
        touch = (e.participants || []).map(lane); break;
      case "society.router-message-committed/v1": {
        const receivers = (conversations.get(e.conversationId) || []).filter((p) => p !== e.senderId);
        messages.set(e.messageId, { row: index, t, sender: e.senderId, receivers, done: new Map() });
        touch = [lane(e.senderId), ...receivers.map(lane)]; kind = "message"; break;
      }
      case "society.router-messages-delivered/v1": case "society.router-message-delivered/v1": {
        touch = [lane(e.receiverId)];
        for (const id of e.messageIds || [e.messageId]) {  // one id: what older routers wrote
          const m = messages.get(id);
          if (m && !m.done.has(e.receiverId)) m.done.set(e.receiverId, { ok: true, latency: t - m.t });
          if (m) touch.push(lane(m.sender));
        }
        break;
      }
      case "society.link-message-dropped/v1": {
        const m = messages.get(e.messageId);
        if (m) m.done.set(e.receiverId, { ok: false, reason: e.reason });
        touch = [lane(e.senderId), lane(e.receiverId)]; kind = "dropped"; break;
      }
      case "society.link-message-delayed/v1": case "society.link-message-held/v1":
        touch = [lane(e.senderId), lane(e.receiverId)]; kind = "fault"; break;
      case "society.link-down/v1":
        openDown.set(e.senderId + ">" + e.receiverId, { from: index, to: null, a: lane(e.senderId), b: lane(e.receiverId) });
        touch = [lane(e.senderId), lane(e.receiverId)]; kind = "fault"; break;
      case "society.link-up/v1": {
        const key = e.senderId + ">" + e.receiverId, span = openDown.get(key);
        if (span) { span.to = index; downSpans.push(span); openDown.delete(key); }
        touch = [lane(e.senderId), lane(e.receiverId)]; kind = "fault"; break;
      }
      case "society.link-policy-set/v1": case "society.link-policy-cleared/v1":
        touch = [lane(e.senderId), lane(e.receiverId)]; kind = "fault"; break;
      case "society.agent-runtime-ready/v1": agentState(e.agent).state = "ready"; touch = [lane("agent:" + e.agent)]; break;
      case "society.agent-runtime-completed/v1": agentState(e.agent).state = "completed"; touch = [lane("agent:" + e.agent)]; break;
      case "society.agent-runtime-failed/v1": case "society.agent-runtime-start-failed/v1":
        agentState(e.agent).state = "failed"; touch = [lane("agent:" + e.agent)]; kind = "failure"; break;
      case "society.readiness-gate-passed/v1":
        summary.readiness = "passed at " + offset(t); summary.dispatch = "dispatched at " + offset(t); kind = "milestone"; break;
      case "society.readiness-gate-failed/v1": summary.readiness = "failed: " + (e.reason || ""); kind = "failure"; break;
      case "society.program-succeeded/v2":
      case "society.program-succeeded/v1": summary.outcome = { ok: true, text: "program succeeded" }; kind = "milestone"; break;
      case "society.program-failed/v1": summary.outcome = { ok: false, text: "program failed: " + e.reason + ": " + e.detail }; kind = "failure"; break;
      case "society.program-interrupted/v1": summary.outcome = { ok: false, text: "interrupted: " + e.reason }; kind = "failure"; break;
      case "society.platform-failed/v1": summary.outcome = { ok: false, text: "platform failed: " + e.reason }; kind = "failure"; break;
      case "society.agent-model-usage/v1": case "society.agent-model-call-failed/v1": {
        let u = usage.get(e.agent);
        if (!u) { u = { calls: 0, failed: 0, tokens: 0, cost: 0 }; usage.set(e.agent, u); }
        u.calls += 1;
        if (tag.endsWith("call-failed/v1")) u.failed += 1;
        else {
          u.tokens = (u.tokens === null || e.promptTokens == null || e.completionTokens == null) ? null : u.tokens + e.promptTokens + e.completionTokens;
          u.cost = (u.cost === null || e.costUsd == null) ? null : u.cost + e.costUsd;
        }
        touch = [lane("agent:" + e.agent)]; break;
      }
      default:
        if (e.agent) touch = [lane("agent:" + e.agent)];
        else if (e.endpointId) touch = [lane(e.endpointId)];
    }
    involved.push(touch.filter((i) => i >= 0));
    kinds.push(kind);
    searchText.push(null);
    return index;
  }

  function shown(index) {
    if (hiddenTags.has(rows[index][3])) return false;
    const touch = involved[index];
    if (touch.length && touch.every((i) => hiddenLanes.has(i))) return false;
    if (query) {
      let text = searchText[index];
      if (text === null) {
        const r = rows[index];
        text = searchText[index] = (tags[r[3]] + " " + producers[r[2]] + " " + JSON.stringify(r[4])).toLowerCase();
      }
      if (!text.includes(query)) return false;
    }
    return true;
  }

  function describe(index) {
    const r = rows[index], tag = tags[r[3]], e = r[4];
    switch (tag) {
      case "society.router-message-committed/v1": {
        const m = messages.get(e.messageId);
        const fates = m ? m.receivers.map((p) => {
          const d = m.done.get(p);
          return !d ? p + " pending" : d.ok ? p + " " + ms(d.latency) : p + " DROPPED (" + d.reason + ")";
        }) : [];
        return e.senderId + " \u2192 " + JSON.stringify((e.parts || []).join(" ")) + "  [" + fates.join(", ") + "]";
      }
      case "society.router-messages-delivered/v1": case "society.router-message-delivered/v1": {
        const ids = e.messageIds || [e.messageId];
        const m = ids.length === 1 && messages.get(ids[0]), d = m && m.done.get(e.receiverId);
        return ids.join(", ") + " delivered to " + e.receiverId + (d && d.ok ? " after " + ms(d.latency) : "");
      }
      case "society.link-message-dropped/v1": return "dropped " + e.messageId + " " + e.senderId + " \u2192 " + e.receiverId + ": " + e.reason;
      case "society.link-message-delayed/v1": return "delayed " + e.messageId + " " + e.senderId + " \u2192 " + e.receiverId + " by " + e.totalSeconds + " s";
      case "society.link-message-held/v1": return "held " + e.messageId + " " + e.senderId + " \u2192 " + e.receiverId;
      case "society.link-down/v1": return "link down " + e.senderId + " \u2192 " + e.receiverId;
      case "society.link-up/v1": return "link up " + e.senderId + " \u2192 " + e.receiverId;
      default:
        return Object.entries(e).map(([k, v]) => k + "=" + (typeof v === "string" ? v : JSON.stringify(v))).join("  ").slice(0, 400);
    }
  }

  function laneSvg(index) {
    const width = lanes.length * LANE, mid = ROW / 2, parts = [];
    for (const span of downSpans.concat([...openDown.values()])) {
      if (index >= span.from && (span.to === null || index <= span.to)) {
        for (const l of [span.a, span.b]) parts.push(`<rect x="${l * LANE + 4}" y="0" width="${LANE - 8}" height="${ROW}" fill="#fecaca" opacity="0.55"/>`);
      }
    }
    for (let l = 0; l < lanes.length; l++) parts.push(`<line x1="${l * LANE + LANE / 2}" y1="0" x2="${l * LANE + LANE / 2}" y2="${ROW}" stroke="#d9dce3"/>`);
    const r = rows[index], tag = tags[r[3]], e = r[4], x = (id) => laneOf.get(id) * LANE + LANE / 2;
    if (tag === "society.router-message-committed/v1") {
      const m = messages.get(e.messageId);
      if (m && laneOf.has(m.sender)) {
        for (const p of m.receivers) {
          if (!laneOf.has(p)) continue;
          const d = m.done.get(p), color = !d ? "#9ca3af" : d.ok ? "#15803d" : "#b91c1c";
          const x1 = x(m.sender), x2 = x(p), dir = x2 > x1 ? -1 : 1;
          parts.push(`<line x1="${x1}" y1="${mid}" x2="${x2 + dir * 4}" y2="${mid}" stroke="${color}" stroke-width="1.5"${d && !d.ok ? ' stroke-dasharray="3 2"' : ""}/>`);
          parts.push(d && !d.ok
            ? `<text x="${x2}" y="${mid + 4}" text-anchor="middle" fill="#b91c1c" font-weight="700">\u2715</text>`
            : `<path d="M${x2 + dir * 4} ${mid} l${dir * 5} -3 v6 z" fill="${color}"/>`);
        }
        parts.push(`<circle cx="${x(m.sender)}" cy="${mid}" r="4" fill="#2563eb"/>`);
      }
    } else {
      for (const l of involved[index]) {
        const color = kinds[index] === "dropped" ? "#b91c1c" : kinds[index] === "fault" ? "#b45309" : "#64748b";
        parts.push(`<circle cx="${l * LANE + LANE / 2}" cy="${mid}" r="3" fill="${color}"/>`);
      }
    }
    return `<svg width="${width}" viewBox="0 0 ${width} ${ROW}">${parts.join("")}</svg>`;
  }

  const viewport = document.getElementById("viewport"), spacer = document.getElementById("spacer");
  let scheduled = false;
  function render() {
    scheduled = false;
    spacer.style.height = visible.length * ROW + "px";
    const first = Math.max(0, Math.floor(viewport.scrollTop / ROW) - OVERSCAN);
    const last = Math.min(visible.length, Math.ceil((viewport.scrollTop + viewport.clientHeight) / ROW) + OVERSCAN);
    const html = [];
    for (let v = first; v < last; v++) {
      const index = visible[v], r = rows[index];
      html.push(`<div class="row ${kinds[index]}${query ? " match" : ""}" data-seq="${r[0]}" data-tag="${esc(tags[r[3]])}" style="top:${v * ROW}px">` +
        `<span class="t">${offset(r[1])}</span><span class="seq">#${r[0]}</span>` +
        `<span class="tag" title="${esc(tags[r[3]])} by ${esc(producers[r[2]])}">${esc(short(tags[r[3]]))}</span>` +
        laneSvg(index) + `<span class="text">${esc(describe(index))}</span></div>`);
    }
    spacer.innerHTML = html.join("");
    document.getElementById("count").textContent = visible.length.toLocaleString() + " of " + rows.length.toLocaleString() + " records";
  }
  function schedule() { if (!scheduled) { scheduled = true; requestAnimationFrame(render); } }
  function refilter() { visible = []; for (let i = 0; i < rows.length; i++) if (shown(i)) visible.push(i); schedule(); }

  function renderHeads() {
    document.getElementById("lane-heads").innerHTML = lanes.map((id) => {
      const [kind, name] = id.includes(":") ? id.split(/:(.*)/s) : ["other", id];
      const state = kind === "agent" && agents.has(name) ? " (" + agents.get(name).state + ")" : "";
      return `<span class="lane-head ${esc(kind)}" data-lane="${esc(id)}" title="${esc(id + state)}">${esc(name)}</span>`;
    }).join("");
    document.getElementById("agent-filter").innerHTML = lanes.map((id, i) =>
      `<label><input type="checkbox" data-lane-index="${i}"${hiddenLanes.has(i) ? "" : " checked"}> ${esc(id)}</label>`).join("");
    document.getElementById("type-filter").innerHTML = tags.map((tag, i) =>
      `<label><input type="checkbox" data-tag-index="${i}" data-tag="${esc(tag)}"${hiddenTags.has(i) ? "" : " checked"}> ${esc(tag)}</label>`).join("");
  }

  function renderSummary() {
    const v = DATA.verification, status = DATA.live && v.status !== "failed" ? "live" : v.status;
    const reasons = (v.reasons || []).map((r) => r.reason + ": " + r.detail).join("; ");
    const labels = { pinned: "verified \u00b7 signature pinned", self: "verified \u00b7 self-signed (integrity, not origin)",
      failed: "DOES NOT VERIFY", incomplete: "verified prefix \u00b7 incomplete", live: "live \u00b7 verified once complete" };
    document.getElementById("verification").outerHTML =
      `<span id="verification" class="badge ${status}" data-status="${status}">${labels[status] || status}</span>` +
      (reasons ? `<span class="reasons" id="verification-reasons">${esc(reasons)}</span>` : "");
    document.getElementById("readiness").textContent = summary.readiness || "not yet";
    document.getElementById("dispatch").textContent = summary.dispatch || "not yet";
    const o = document.getElementById("outcome");
    o.textContent = summary.outcome ? summary.outcome.text : "no outcome yet";
    o.style.color = summary.outcome ? (summary.outcome.ok ? "var(--ok)" : "var(--bad)") : "";
    const names = [...new Set([...agents.keys(), ...usage.keys()])];
    document.getElementById("usage").innerHTML = "<tr><th>agent</th><th>state</th><th>model calls</th><th>tokens</th><th>cost (USD)</th></tr>" +
      names.map((name) => {
        const u = usage.get(name), a = agents.get(name);
        const cells = !u ? ["0", "\u2013", "no model use"] : [u.calls + (u.failed ? " (" + u.failed + " failed)" : ""),
          u.tokens === null ? "unknown" : u.tokens.toLocaleString(), u.cost === null ? "unknown" : u.cost.toFixed(6)];
        return `<tr data-agent="${esc(name)}"><td>${esc(name)}</td><td>${esc(a ? a.state : "?")}</td><td>${cells.map(esc).join("</td><td>")}</td></tr>`;
      }).join("");
  }

  document.getElementById("filters").addEventListener("change", (event) => {
    const box = event.target;
    if (box.dataset.laneIndex !== undefined) { const i = +box.dataset.laneIndex; box.checked ? hiddenLanes.delete(i) : hiddenLanes.add(i); }
    if (box.dataset.tagIndex !== undefined) { const i = +box.dataset.tagIndex; box.checked ? hiddenTags.delete(i) : hiddenTags.add(i); }
    refilter();
  });
  let searchTimer = null;
  document.getElementById("search").addEventListener("input", (event) => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { query = event.target.value.trim().toLowerCase(); refilter(); }, 120);
  });
  viewport.addEventListener("scroll", schedule, { passive: true });
  window.addEventListener("resize", schedule);
  spacer.addEventListener("click", (event) => {
    const row = event.target.closest(".row"); if (!row) return;
    const r = rows.find((x) => x[0] === +row.dataset.seq), detail = document.getElementById("detail");
    detail.textContent = JSON.stringify({ sequence: r[0], elapsedMicros: r[1], producer: producers[r[2]], tag: tags[r[3]], event: r[4] }, null, 2);
    detail.style.display = "block";
  });
  document.getElementById("detail").addEventListener("click", (event) => { event.currentTarget.style.display = "none"; });

  for (const row of DATA.rows) ingest(row);
  renderHeads(); renderSummary(); refilter();
  window.societyReplay = {
    rows: () => rows.length, visible: () => visible.length, lanes: () => lanes.slice(),
    firstOf: (tag) => { const i = rows.findIndex((r) => tags[r[3]] === tag); return i < 0 ? null : rows[i][0]; },
    reveal: (seq) => { const v = visible.findIndex((i) => rows[i][0] >= seq); viewport.scrollTop = Math.max(0, v * ROW); render(); },
  };

  if (DATA.live) {
    // A live page follows the newest records (as `tail -f` does) until the reader scrolls up.
    spacer.style.height = visible.length * ROW + "px";
    viewport.scrollTop = spacer.offsetHeight;
    const source = new EventSource(DATA.live.events + "&from=" + rows.length);
    let lanesBefore = lanes.length;
    source.addEventListener("record", (event) => {
      const row = JSON.parse(event.data);
      if (!tags.includes(row.tag)) tags.push(row.tag);
      if (!producers.includes(row.producer)) producers.push(row.producer);
      const stick = viewport.scrollTop + viewport.clientHeight >= spacer.offsetHeight - ROW * 2;
      const index = ingest([row.seq, row.us, producers.indexOf(row.producer), tags.indexOf(row.tag), row.event]);
      if (shown(index)) visible.push(index);
      if (lanes.length !== lanesBefore || tags.length > document.querySelectorAll("#type-filter input").length) { renderHeads(); lanesBefore = lanes.length; }
      renderSummary();
      schedule();
      if (stick) requestAnimationFrame(() => { viewport.scrollTop = spacer.offsetHeight; });
    });
    source.addEventListener("complete", () => { source.close(); setTimeout(() => location.reload(), 300); });
    source.addEventListener("failed", (event) => {
      source.close(); DATA.verification = { status: "failed", reasons: [JSON.parse(event.data)] }; DATA.live = null; renderSummary();
    });
  }
})();
