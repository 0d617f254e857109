"""The dashboard's pages: Jinja2 templates with autoescaping on for every one of them (topic names, bodies,
properties and broker remarks are other people's text), plus the one stylesheet and script they load
(served from the dashboard itself: no CDN, no build step, no inline script under its CSP). Every POST form
carries the CSRF token (``csrf``) that app.py checks against the browser's cookie."""

from __future__ import annotations

from typing import Any

import jinja2

BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }} · rmq dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/dash.css"><script src="/static/dash.js" defer></script></head>
<body><nav><b>rmq</b>
<a href="/cluster">Cluster</a><a href="/topics">Topics</a><a href="/groups">Groups</a>
<a href="/messages">Messages</a><a href="/message">Message by id</a><a href="/dlq">DLQ</a>
<a href="/send">Send</a>{% if user %}<span class="user">{{ user }}</span>{% endif %}</nav>
<main><h1>{{ title }}</h1>
{% block body %}{% endblock %}
</main></body></html>
"""

PAGES: dict[str, str] = {
    "base.html": BASE,
    "error.html": """{% extends "base.html" %}{% block body %}
<p class="error" id="error">{{ status }}: {{ message }}</p>{% endblock %}""",
    "cluster.html": """{% extends "base.html" %}{% block body %}
<p>Name servers: {{ namesrv | join(", ") }}</p>
<table id="brokers"><thead><tr><th>Cluster</th><th>Broker</th><th>Id</th><th>Address</th><th>Role</th>
<th>Version</th><th>Put TPS (10s 1m 10m)</th><th>Get TPS</th><th>Put today</th><th>Get today</th>
<th>Disk ratio</th><th>Runtime</th></tr></thead><tbody>
{% for r in rows %}<tr><td>{{ r.cluster }}</td><td>{{ r.name }}</td><td>{{ r.id }}</td><td>{{ r.addr }}</td>
{% if r.problem %}<td colspan="8" class="error">{{ r.problem }}</td>{% else %}
<td>{{ r.rt.brokerRole }}</td><td>{{ r.rt.brokerVersionDesc }}</td><td>{{ r.rt.putTps }}</td>
<td>{{ r.rt.getTransferedTps }}</td><td>{{ r.rt.msgPutTotalTodayNow }}</td><td>{{ r.rt.msgGetTotalTodayNow }}</td>
<td>{{ r.rt.commitLogDiskRatio }}</td><td>{{ r.rt.runtime }}</td>{% endif %}</tr>
{% else %}<tr><td colspan="12">no broker registered</td></tr>{% endfor %}</tbody></table>
<h2>Throughput (this broker, messages/s)</h2>
<p>put <b id="put-tps">-</b> · get <b id="get-tps">-</b></p>
<canvas id="tps" width="800" height="200" data-src="/api/stats"></canvas>
<p class="legend"><span class="put">■ put</span> <span class="get">■ get</span></p>
{% if rows %}<details><summary>Runtime info of {{ rows[0].name }}</summary><table class="kv">
{% for k, v in rows[0].rt | dictsort %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}</table></details>{% endif %}
{% endblock %}""",
    "topics.html": """{% extends "base.html" %}{% block body %}
<p>{% if show_system %}<a href="/topics">hide system topics</a>{% else %}<a href="/topics?system=1">show system,
retry and DLQ topics</a>{% endif %}</p>
<table id="topics"><thead><tr><th>Topic</th><th>Kind</th><th></th></tr></thead><tbody>
{% for r in rows %}<tr><td><a href="/topic?name={{ r.name | urlencode }}">{{ r.name }}</a></td><td>{{ r.kind }}</td>
<td><a href="/messages?topic={{ r.name | urlencode }}">messages</a> ·
<a href="/send?topic={{ r.name | urlencode }}">send</a></td></tr>
{% else %}<tr><td colspan="3">no topics</td></tr>{% endfor %}</tbody></table>
<h2>Create or update a topic</h2>
<form method="post" action="/topics/save" id="create-topic"><input type="hidden" name="csrf" value="{{ csrf }}">
<label>Topic <input name="topic" required pattern="[%|a-zA-Z0-9_-]+" maxlength="127"></label>
<label>Queues <input name="queues" type="number" min="1" max="1024" value="8"></label>
<label>Permission <select name="perm">{% for k, v in perms.items() %}<option value="{{ k }}">{{ v }}</option>
{% endfor %}</select></label>
<label><input type="checkbox" name="order"> ordered</label>
<button type="submit">Save</button></form>
{% endblock %}""",
    "topic.html": """{% extends "base.html" %}{% block body %}
<p><a href="/messages?topic={{ name | urlencode }}">newest messages</a> ·
<a href="/send?topic={{ name | urlencode }}">send a test message</a> · {{ total }} messages stored</p>
<h2>Route</h2>
<table id="route"><thead><tr><th>Broker</th><th>Cluster</th><th>Addresses</th><th>Read queues</th>
<th>Write queues</th><th>Perm</th></tr></thead><tbody>
{% for bd in route.broker_datas %}<tr><td>{{ bd.broker_name }}</td><td>{{ bd.cluster }}</td>
<td>{% for id, a in bd.addrs | dictsort %}{{ id }}: {{ a }} {% endfor %}</td>
{% for q in route.queue_datas if q.broker_name == bd.broker_name %}<td>{{ q.read_queue_nums }}</td>
<td>{{ q.write_queue_nums }}</td><td>{{ q.perm }}</td>{% endfor %}</tr>{% endfor %}</tbody></table>
<h2>Queues</h2>
<table id="queues"><thead><tr><th>Broker</th><th>Queue</th><th>Min offset</th><th>Max offset</th>
<th>Last stored</th></tr></thead><tbody>
{% for r in stats %}<tr><td>{{ r.broker }}</td><td>{{ r.queue }}</td><td>{{ r.min }}</td><td>{{ r.max }}</td>
<td>{{ r.last }}</td></tr>{% endfor %}</tbody></table>
<h2>Update</h2>
<form method="post" action="/topics/save" id="update-topic"><input type="hidden" name="csrf" value="{{ csrf }}">
<input type="hidden" name="topic" value="{{ name }}">
<label>Queues <input name="queues" type="number" min="1" max="1024"
 value="{{ qd.read_queue_nums if qd else 8 }}"></label>
<label>Permission <select name="perm">{% for k, v in perms.items() %}<option value="{{ k }}"
{% if qd and qd.perm|string == k %} selected{% endif %}>{{ v }}</option>{% endfor %}</select></label>
<label><input type="checkbox" name="order"> ordered</label><button type="submit">Update</button></form>
<form method="post" action="/topics/delete" id="delete-topic" data-confirm="Delete topic {{ name }}?"><input type="hidden" name="csrf" value="{{ csrf }}">
<input type="hidden" name="topic" value="{{ name }}"><button type="submit" class="danger">Delete topic</button></form>
{% endblock %}""",
    "groups.html": """{% extends "base.html" %}{% block body %}
<p>{% if show_system %}<a href="/groups">hide system groups</a>{% else %}<a href="/groups?system=1">show system
groups</a>{% endif %}</p>
<table id="groups"><thead><tr><th>Group</th><th>Clients online</th><th>Lag</th><th>Model</th><th>Orderly</th>
<th>Enabled</th><th>Max retries</th><th></th></tr></thead><tbody>
{% for r in rows %}<tr><td><a href="/group?name={{ r.name | urlencode }}">{{ r.name }}</a></td><td>{{ r.clients }}</td>
<td>{{ r.lag }}</td><td>{{ r.mode }}</td><td>{{ r.orderly }}</td><td>{{ r.enabled }}</td><td>{{ r.retry }}</td>
<td><a href="/dlq?group={{ r.name | urlencode }}">DLQ</a></td></tr>
{% else %}<tr><td colspan="8">no consumer groups</td></tr>{% endfor %}</tbody></table>
<h2>Create or update a group</h2>
<form method="post" action="/groups/save" id="create-group"><input type="hidden" name="csrf" value="{{ csrf }}">
<label>Group <input name="group" required pattern="[%|a-zA-Z0-9_-]+" maxlength="255"></label>
<label>Max retries <input name="retryMaxTimes" type="number" min="0" max="1000" value="16"></label>
<label><input type="checkbox" name="orderly"> orderly</label>
<input type="hidden" name="consumeEnable" value="on"><button type="submit">Save</button></form>
{% endblock %}""",
    "group.html": """{% extends "base.html" %}{% block body %}
{% if reset %}<p class="ok" id="reset-result">{{ reset }}</p>{% endif %}
<p>Total lag <b id="lag">{{ lag }}</b> · <a href="/dlq?group={{ name | urlencode }}">dead letters</a>
{% if cfg %} · max retries {{ cfg.retryMaxTimes }} · orderly {{ cfg.consumeMessageOrderly }}{% endif %}</p>
<h2>Progress</h2>
<table id="progress"><thead><tr><th>Topic</th><th>Broker</th><th>Queue</th><th>Broker offset</th>
<th>Consumer offset</th><th>Lag</th><th>Last consumed</th></tr></thead><tbody>
{% for r in rows %}<tr><td>{{ r.topic }}</td><td>{{ r.broker }}</td><td>{{ r.queue }}</td><td>{{ r.brokerOffset }}</td>
<td>{{ r.consumerOffset }}</td><td>{{ r.lag }}</td><td>{{ r.last }}</td></tr>
{% else %}<tr><td colspan="7">no committed offsets</td></tr>{% endfor %}</tbody></table>
<h2>Clients online</h2>
<p>{{ conns.consumeType }} {{ conns.messageModel }} {{ conns.consumeFromWhere }}</p>
<table id="clients"><thead><tr><th>Client id</th><th>Address</th><th>Language</th><th>Version</th></tr></thead><tbody>
{% for c in conns.connectionSet %}<tr><td>{{ c.clientId }}</td><td>{{ c.clientAddr }}</td><td>{{ c.language }}</td>
<td>{{ c.version }}</td></tr>{% else %}<tr><td colspan="4">none</td></tr>{% endfor %}</tbody></table>
{% if conns.subscriptionTable %}<h2>Subscriptions</h2><table><tbody>
{% for t, sd in conns.subscriptionTable | dictsort %}<tr><th>{{ t }}</th><td>{{ sd.expressionType }}
{{ sd.subString }}</td></tr>{% endfor %}</tbody></table>{% endif %}
<h2>Reset offsets by time</h2>
<form method="post" action="/groups/reset" id="reset-offset" data-confirm="Move {{ name }} to that time?"><input type="hidden" name="csrf" value="{{ csrf }}">
<input type="hidden" name="group" value="{{ name }}"><input type="hidden" name="ts" value="">
<label>Topic {% if topics %}<select name="topic">{% for t in topics %}<option>{{ t }}</option>{% endfor %}</select>
{% else %}<input name="topic" required>{% endif %}</label>
<label>Time <input name="when" type="datetime-local" step="1" required></label>
<button type="submit">Reset</button></form>
{% endblock %}""",
    "message_detail.html": """<table class="kv message"><tbody>
<tr><th>Topic</th><td><a href="/topic?name={{ m.topic | urlencode }}">{{ m.topic }}</a></td></tr>
<tr><th>Message id</th><td class="msgid">{{ m.msgId }}</td></tr>
<tr><th>Offset message id</th><td><a href="/message?id={{ m.offsetMsgId | urlencode }}">{{ m.offsetMsgId }}</a></td></tr>
<tr><th>Tags</th><td>{{ m.tags }}</td></tr><tr><th>Keys</th><td>{{ m['keys'] }}</td></tr>
<tr><th>Queue / offset</th><td>{{ m.queueId }} / {{ m.queueOffset }}</td></tr>
<tr><th>Born</th><td>{{ m.born }} from {{ m.bornHost }}</td></tr>
<tr><th>Stored</th><td>{{ m.stored }} on {{ m.storeHost }}</td></tr>
<tr><th>Reconsume times</th><td>{{ m.reconsumeTimes }}</td></tr>
<tr><th>Properties</th><td><table class="props">{% for k, v in m.properties %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>
{% endfor %}</table></td></tr>
<tr><th>Body ({{ m.size }} bytes{% if m.binary %}, not UTF-8{% endif %})</th><td><pre class="body">{{ m.body }}</pre></td></tr>
</tbody></table>""",
    "message.html": """{% extends "base.html" %}{% block body %}
<form method="get" action="/message" id="lookup-id">
<label>Topic <input name="topic" value="{{ topic }}" placeholder="needed for a client msgId"></label>
<label>Message id <input name="id" value="{{ msg_id }}" required size="60"></label><button type="submit">Look up</button>
</form>
{% if m %}{% include "message_detail.html" %}{% endif %}
{% endblock %}""",
    "message_list.html": """<table class="list" id="message-list"><thead><tr><th>Stored</th><th>Message id</th><th>Tags</th>
<th>Keys</th><th>Queue/offset</th><th>Body</th>{% if resend_group %}<th></th>{% endif %}</tr></thead><tbody>
{% for m in found %}<tr><td>{{ m.stored }}</td>
<td><a href="/message?id={{ m.offsetMsgId | urlencode }}">{{ m.msgId }}</a></td><td>{{ m.tags }}</td><td>{{ m['keys'] }}</td>
<td>{{ m.queueId }}/{{ m.queueOffset }}</td><td class="body">{{ m.body | truncate(120) }}</td>
{% if resend_group %}<td><form method="post" action="/dlq/resend" class="resend"><input type="hidden" name="csrf" value="{{ csrf }}">
<input type="hidden" name="group" value="{{ resend_group }}"><input type="hidden" name="offsetMsgId" value="{{ m.offsetMsgId }}">
<button type="submit">Resend</button></form></td>{% endif %}</tr>
{% else %}<tr><td colspan="7">no messages</td></tr>{% endfor %}</tbody></table>""",
    "messages.html": """{% extends "base.html" %}{% block body %}
<form method="get" action="/messages" id="by-key"><label>Topic <input name="topic" value="{{ topic }}" required></label>
<label>Key <input name="key" value="{{ key }}" required></label><button type="submit">By key</button></form>
<form method="get" action="/messages" id="by-time"><label>Topic <input name="topic" value="{{ topic }}" required></label>
<label>From <input name="begin" type="datetime-local" step="1" value="{{ begin }}"></label>
<label>To <input name="end" type="datetime-local" step="1" value="{{ end }}"></label>
<button type="submit">By time</button></form>
{% if found is not none %}<h2>{{ topic }}: {{ how }} ({{ found | length }}, at most {{ max }})</h2>
{% set resend_group = "" %}{% include "message_list.html" %}{% endif %}
{% endblock %}""",
    "dlq.html": """{% extends "base.html" %}{% block body %}
{% if resent %}<p class="ok" id="resent">{{ resent }}</p>{% endif %}
<form method="get" action="/dlq" id="dlq-group"><label>Consumer group <input name="group" value="{{ group }}" required>
</label><button type="submit">Browse</button></form>
{% if missing %}<p>No dead-letter queue for {{ group }}: {{ missing }}</p>
{% elif found is not none %}<h2>%DLQ%{{ group }} (newest {{ found | length }})</h2>
<p>Resend puts a message back into the group's retry topic: only this group consumes it again.</p>
{% set resend_group = group %}{% include "message_list.html" %}{% endif %}
{% endblock %}""",
    "send.html": """{% extends "base.html" %}{% block body %}
{% if result %}<table class="kv" id="send-result"><tr><th>Status</th><td>{{ result.status }}</td></tr>
<tr><th>Message id</th><td><a id="sent-id" href="/message?topic={{ topic | urlencode }}&amp;id={{ result.msgId | urlencode }}"
>{{ result.msgId }}</a></td></tr><tr><th>Offset message id</th><td>{{ result.offsetMsgId }}</td></tr>
<tr><th>Queue</th><td>{{ result.broker }} / {{ result.queue }} @ {{ result.offset }}</td></tr></table>{% endif %}
<form method="post" action="/send" id="send-form"><input type="hidden" name="csrf" value="{{ csrf }}">
<label>Topic <input name="topic" value="{{ topic }}" required></label>
<label>Tags <input name="tags"></label><label>Keys <input name="keys" placeholder="space separated"></label>
<label class="wide">Body <textarea name="body" rows="6" required></textarea></label>
<button type="submit">Send</button></form>
{% endblock %}""",
}

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; }
nav { background: #1f3a5f; padding: .6em 1em; } nav a, nav b { color: #fff; margin-right: 1.2em; text-decoration: none; }
nav .user { color: #cde; float: right; }
main { padding: 1em 1.5em; } h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; margin: .5em 0; } th, td { border: 1px solid #ccc; padding: .25em .6em;
 text-align: left; vertical-align: top; } thead th { background: #eef2f7; }
td.body, pre.body { white-space: pre-wrap; word-break: break-all; max-width: 60em; margin: 0; }
form { margin: .8em 0; } label { margin-right: 1em; } label.wide { display: block; } textarea { width: 40em; display: block; }
.error { color: #a00; font-weight: bold; } .ok { color: #060; } button.danger { color: #a00; }
canvas { border: 1px solid #ccc; max-width: 100%; } .put { color: #1f77b4; } .get { color: #d62728; }
"""

JS = r"""
"use strict";
(function () {
  function draw(canvas, points) {
    var ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height, pad = 30;
    ctx.clearRect(0, 0, w, h);
    var max = 1;
    points.forEach(function (p) { max = Math.max(max, p[1], p[2]); });
    ctx.strokeStyle = "#ccc"; ctx.fillStyle = "#666"; ctx.font = "11px sans-serif";
    ctx.beginPath(); ctx.moveTo(pad, 5); ctx.lineTo(pad, h - pad); ctx.lineTo(w - 5, h - pad); ctx.stroke();
    ctx.fillText(max.toFixed(1), 2, 12); ctx.fillText("0", 2, h - pad);
    if (points.length < 2) { return; }
    var t0 = points[0][0], t1 = points[points.length - 1][0], span = Math.max(1, t1 - t0);
    [[1, "#1f77b4"], [2, "#d62728"]].forEach(function (s) {
      ctx.strokeStyle = s[1]; ctx.beginPath();
      points.forEach(function (p, i) {
        var x = pad + (p[0] - t0) / span * (w - pad - 5), y = (h - pad) - p[s[0]] / max * (h - pad - 5);
        if (i === 0) { ctx.moveTo(x, y); } else { ctx.lineTo(x, y); }
      });
      ctx.stroke();
    });
  }
  function poll(canvas) {
    fetch(canvas.dataset.src, {credentials: "same-origin"}).then(function (r) { return r.json(); })
      .then(function (d) {
        document.getElementById("put-tps").textContent = d.putTps.toFixed(2);
        document.getElementById("get-tps").textContent = d.getTps.toFixed(2);
        canvas.dataset.polls = String(Number(canvas.dataset.polls || 0) + 1);
        draw(canvas, d.points);
      }).catch(function () {});
  }
  document.addEventListener("DOMContentLoaded", function () {
    var canvas = document.getElementById("tps");
    if (canvas) { poll(canvas); setInterval(function () { poll(canvas); }, 1000); }
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) { if (!window.confirm(f.dataset.confirm)) { e.preventDefault(); } });
    });
    var reset = document.getElementById("reset-offset");
    if (reset) {
      reset.addEventListener("submit", function () {  // the browser's time zone, not the server's
        var when = reset.elements.when.value;
        if (when) { reset.elements.ts.value = String(new Date(when).getTime()); }
      });
    }
  });
})();
"""

_ENV = jinja2.Environment(loader=jinja2.DictLoader(PAGES), autoescape=True, undefined=jinja2.ChainableUndefined,
                          trim_blocks=True, lstrip_blocks=True)


def render(template: str, /, **ctx: Any) -> str:
    return _ENV.get_template(template).render(**ctx)
