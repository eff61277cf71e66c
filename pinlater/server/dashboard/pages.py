"""The dashboard's pages as HTML fragments, built from the admin API's JSON-ready dicts
(`pinlater.ops.admin_reads`): the same data the API serves, so a page never shows something the
API would not. Pure functions of their input (no I/O), each escaping what it inserts through
`markup.fill`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from pinlater.ops.job_view import escape_bytes
from pinlater.ops.metrics import DEPTH_STATES
from pinlater.server.dashboard.markup import (
    Markup,
    esc,
    fill,
    join,
    number,
    page,
    sparkline,
    when,
)

#: the job states a job browser can list, in order
STATES = ("pending", "in_progress", "succeeded", "failed")
#: characters of a body preview shown in a job list (the job page shows more)
LIST_PREVIEW_CHARS = 120
#: bytes of a body shown as text on the job page (the base64 of the whole body follows)
JOB_BODY_BYTES = 16 * 1024
_STATE_LABELS = {
    "pending": "Pending",
    "pending_future": "Future",
    "in_progress": "In progress",
    "succeeded": "Succeeded",
    "failed": "Failed",
}


def queue_url(queue: str, **query: object) -> str:
    path = "/ui/queues/" + quote(queue, safe="")
    shown = {k: v for k, v in query.items() if v not in (None, "", False)}
    return path + ("?" + urlencode(shown) if shown else "")


def job_url(descriptor: str) -> str:
    return "/ui/jobs/" + quote(descriptor, safe=":")


def link(href: str, text: object, css: str = "") -> Markup:
    return fill('<a href="$href" class="$css">$text</a>', href=href, text=text, css=css)


def badges(summary: Mapping[str, Any]) -> Markup:
    out = []
    if summary.get("paused"):
        out.append(
            fill(
                '<span class="badge paused" title="source: $s">paused</span>',
                s=summary["settings"]["paused"]["source"],
            )
        )
    if summary.get("rate_limited"):
        rate = summary["settings"]["max_jobs_per_second"]
        out.append(
            fill(
                '<span class="badge limited" title="source: $s">limited $r/s</span>',
                s=rate["source"],
                r=number(rate["value"]),
            )
        )
    return join(out, " ") if out else Markup('<span class="badge ok">running</span>')


# ---- overview ----


def overview(
    data: Mapping[str, Any], server: Mapping[str, Any], filter_text: str, max_rows: int
) -> Markup:
    queues = [q for q in data["queues"] if filter_text.lower() in q["name"].lower()]
    shown = queues[:max_rows]
    more = Markup("")
    if len(queues) > len(shown):
        more = fill(
            '<p class="muted">$n more queues: filter by name to see them.</p>',
            n=len(queues) - len(shown),
        )
    window = number(
        data["rate_sample_seconds"]
        * max((len(next(iter(q.get("series", {}).values()), [])) for q in shown), default=0)
    )
    return page(
        "overview.html",
        queue_count=len(data["queues"]),
        server_line=(
            f"{server['backend']['kind']} backend, {len(server['backend']['shards'])} shard(s), "
            f"{server['priorities']} priorities · up {number(round(server['uptime_seconds']))} s"
            + (" · read-only" if server["read_only"] else "")
        ),
        filter=filter_text,
        counts_at=when(data["counts_refreshed_at_ms"]) or Markup("(not yet taken)"),
        cap=number(data["counts_cap"]),
        window=f"{window} s",
        rows=join(_overview_row(q) for q in shown)
        or Markup('<tr><td colspan="12" class="muted">no queues</td></tr>'),
        more=more,
    )


def _overview_row(q: Mapping[str, Any]) -> Markup:
    """One queue's row (f-strings with esc(): the overview renders one per queue, so this
    path is kept cheap; every value still goes through esc)."""
    totals = q["totals"]
    rates = q["rates"]
    cells = "".join(
        f'<td class="num" data-state="{s}">{esc(number(totals.get(s)) if totals else "…")}</td>'
        for s in DEPTH_STATES
    )
    rate_cells = "".join(
        f'<td class="num">{esc(number(rates[event]["1m"]))}</td>'
        for event in ("enqueued", "dequeued", "acked_succeeded", "acked_failed")
    )
    name = esc(q["name"])
    href = esc(queue_url(q["name"]))
    return Markup(
        f'<tr data-queue="{name}"><td class="qname"><a href="{href}">{name}</a></td>'
        f"<td>{badges(q)}</td>{cells}{rate_cells}<td>{sparkline(q.get('series', {}))}</td></tr>"
    )


# ---- one queue ----


def queue_page(
    q: Mapping[str, Any],
    jobs: Markup,
    browse: Mapping[str, Any],
    levels: int,
    max_limit: int,
    actions: Markup,
    settings_forms: Markup,
) -> Markup:
    name = q["name"]
    return page(
        "queue.html",
        queue=name,
        badges=badges(q),
        actions=actions,
        counts_note="counted now"
        if q.get("counts_live")
        else "a shard did not answer: the last background counts",
        counts=counts_table(q["counts"], levels),
        oldest=_oldest(q.get("oldest_pending")),
        rates=rates_table(q["rates"]),
        chart=sparkline(q.get("series", {}), width=240, height=48),
        settings=settings_table(q["settings"]),
        settings_forms=settings_forms,
        queue_url=queue_url(name),
        state_options=_options([(s, _STATE_LABELS[s]) for s in STATES], browse["state"]),
        priority_options=_options(
            [("", "all")] + [(str(p), str(p)) for p in range(1, levels + 1)],
            "" if browse["priority"] is None else str(browse["priority"]),
        ),
        future_checked=Markup(" checked") if browse["future"] else Markup(""),
        limit=browse["limit"],
        max_limit=max_limit,
        jobs=jobs,
    )


def _options(choices: Sequence[tuple[str, str]], selected: str) -> Markup:
    return join(
        fill(
            '<option value="$v"$sel>$label</option>',
            v=v,
            label=label,
            sel=Markup(" selected") if v == selected else Markup(""),
        )
        for v, label in choices
    )


def _oldest(oldest: Mapping[str, Any] | None) -> Markup:
    if not oldest:
        return Markup('<span class="muted">none</span>')
    return fill(
        "$link (priority $p, waiting $age s)",
        link=link(job_url(oldest["descriptor"]), oldest["descriptor"]),
        p=oldest["priority"],
        age=number(oldest["age_seconds"]),
    )


def counts_table(counts: Mapping[str, Mapping[str, int]] | None, levels: int) -> Markup:
    if counts is None:
        return Markup('<p class="muted">not counted yet</p>')
    head = join(fill('<th class="num">p$p</th>', p=p) for p in range(1, levels + 1))
    rows = join(
        fill(
            '<tr data-state="$s"><th>$label</th>$cells<td class="num total">$total</td></tr>',
            s=state,
            label=_STATE_LABELS[state],
            cells=join(
                fill(
                    '<td class="num" data-priority="$p">$v</td>',
                    p=p,
                    v=number(counts[state].get(str(p), 0)),
                )
                for p in range(1, levels + 1)
            ),
            total=number(sum(counts[state].values())),
        )
        for state in DEPTH_STATES
    )
    return fill(
        '<table class="counts"><thead><tr><th>State</th>$head<th class="num">All</th>'
        "</tr></thead><tbody>$rows</tbody></table>",
        head=head,
        rows=rows,
    )


def rates_table(rates: Mapping[str, Mapping[str, float]]) -> Markup:
    rows = join(
        fill(
            '<tr><th>$e</th><td class="num">$a</td><td class="num">$b</td></tr>',
            e=event.replace("_", " "),
            a=number(r["1m"]),
            b=number(r["5m"]),
        )
        for event, r in rates.items()
    )
    return fill(
        '<table><thead><tr><th>Jobs per second</th><th class="num">1 min</th>'
        '<th class="num">5 min</th></tr></thead><tbody>$rows</tbody></table>',
        rows=rows,
    )


def settings_table(settings: Mapping[str, Any]) -> Markup:
    rows = []
    for key in ("paused", "max_jobs_per_second", "claim_timeout_seconds", "unique_window_seconds"):
        s = settings[key]
        rows.append(
            fill(
                '<tr data-setting="$k"><th>$k</th><td>$v</td><td><span class="source">$src</span>'
                "</td><td>$stored</td><td>$file</td></tr>",
                k=key,
                v=_setting_value(s["value"]),
                src=s["source"],
                stored=_setting_value(s.get("stored")) if "stored" in s else "",
                file=_setting_value(s.get("file")) if "file" in s else "",
            )
        )
    share = settings.get("server_share_jobs_per_second")
    note = ""
    if share is not None:
        note = (
            f"this server's share: {number(share)}/s of {settings['servers_sharing_rate']} "
            "server(s)"
        )
    if settings.get("updated_at_ms"):
        note += f" · stored settings changed by {settings.get('updated_by') or '?'}"
    return fill(
        '<table class="settings"><thead><tr><th>Setting</th><th>Effective</th>'
        "<th>Source</th><th>Stored</th><th>File</th></tr></thead><tbody>$rows</tbody>"
        '</table><p class="muted">$note</p>',
        rows=join(rows),
        note=note,
    )


def _setting_value(value: object) -> str:
    if value is None:
        return "\u2013"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return number(value) if isinstance(value, int | float) else str(value)


def job_rows(data: Mapping[str, Any], browse: Mapping[str, Any], page_number: int) -> Markup:
    """The job browser's table and its pager (next page through the scan continuation)."""
    jobs = data["jobs"]
    if not jobs:
        table = Markup('<p class="muted" id="no-jobs">no jobs here</p>')
    else:
        table = fill(
            '<div class="scroll"><table class="jobs"><thead><tr><th>Descriptor</th>'
            '<th class="num">P</th><th>State</th><th class="num">Attempts left</th>'
            "<th>Run after</th><th>Updated</th><th>Status</th><th>Body</th></tr></thead>"
            "<tbody>$rows</tbody></table></div>",
            rows=join(_job_row(j) for j in jobs),
        )
    base = {k: browse[k] for k in ("state", "priority", "future", "limit")}
    pager = [
        fill(
            '<span class="page" id="page-number">page $n · $c jobs</span>',
            n=page_number,
            c=len(jobs),
        )
    ]
    if page_number > 1:
        pager.append(link(queue_url(data["queue"], **base) + "#jobs", "« first page", "button"))
    if data["continuation"]:
        pager.append(
            link(
                queue_url(
                    data["queue"], **base, continuation=data["continuation"], page=page_number + 1
                )
                + "#jobs",
                "next page »",
                "button next-page",
            )
        )
    return fill('$table<p class="pager">$pager</p>', table=table, pager=join(pager, " "))


def _job_row(job: Mapping[str, Any]) -> Markup:
    body = job.get("body") or {}
    preview = body.get("preview", "")
    cut = len(preview) > LIST_PREVIEW_CHARS or body.get("truncated")
    return fill(
        '<tr data-descriptor="$d"><td class="mono">$link</td><td class="num">$p</td>'
        '<td>$state</td><td class="num">$left/$allowed</td><td>$run</td><td>$updated</td>'
        '<td class="status">$status</td><td class="body mono">$preview$more'
        '<span class="size">$size B</span></td></tr>',
        d=job["descriptor"],
        link=link(job_url(job["descriptor"]), job["descriptor"]),
        p=job["priority"],
        state=job["state"],
        left=job["attempts_remaining"],
        allowed=job["attempts_allowed"],
        run=when(job["run_after_ms"]),
        updated=when(job["updated_at_ms"]),
        status=job.get("custom_status") or "",
        preview=preview[:LIST_PREVIEW_CHARS],
        more="…" if cut else "",
        size=number(body.get("size_bytes", 0)),
    )


# ---- one job ----


def job_details(job: Mapping[str, Any]) -> Markup:
    fields = [
        ("Queue", link(queue_url(job["queue"]), job["queue"])),
        ("Shard", job["shard"]),
        ("Priority", job["priority"]),
        ("Local id", job["local_id"]),
        ("State", fill('<span class="state" id="job-state">$s</span>', s=job["state"])),
        ("Attempts", f"{job['attempts_remaining']} left of {job['attempts_allowed']}"),
        ("Custom status", job.get("custom_status") or ""),
        ("Created", when(job["created_at_ms"])),
        ("Run after", when(job["run_after_ms"])),
        ("Updated", when(job["updated_at_ms"])),
        ("Claim", job.get("claim") or ""),
    ]
    body = job.get("body") or {}
    raw = base64.b64decode(body.get("base64", ""))
    shown = escape_bytes(raw[:JOB_BODY_BYTES])
    rows = join(fill("<tr><th>$k</th><td>$v</td></tr>", k=k, v=v) for k, v in fields)
    return fill(
        '<table class="kv">$rows</table><h2>Body <span class="muted">$size bytes$cut</span></h2>'
        '<pre class="body" id="job-body">$body</pre><details><summary>base64</summary>'
        '<pre class="body">$b64</pre></details>',
        rows=rows,
        size=number(len(raw)),
        cut=f", the first {number(JOB_BODY_BYTES)} shown" if len(raw) > JOB_BODY_BYTES else "",
        body=shown,
        b64=body.get("base64", ""),
    )


# ---- shards and janitor ----


def shards_page(data: Mapping[str, Any]) -> Markup:
    rows: list[Markup] = []
    errors: list[Markup] = []
    for s in data["shards"]:
        jobs = s.get("jobs") or {}
        lat = s["latency_ms"]
        status = [("healthy" if s["healthy"] else "unhealthy", "ok" if s["healthy"] else "bad")]
        if s.get("cluster"):  # config `clusters:`
            status.insert(0, (f"cluster {s['cluster']}", "info"))
        if s["dequeue_only"]:
            status.append(("dequeue-only", "limited"))
        if s["settings_home"]:
            status.append(("settings home", "info"))
        rows.append(
            fill(
                '<tr data-shard="$n"><th>$n</th><td>$status</td><td class="num">$calls</td>'
                '<td class="num">$errs</td><td class="num">$p50</td><td class="num">$p99</td>'
                '<td class="num">$max</td>$jobs<td>$at</td></tr>',
                n=s["name"],
                status=join(
                    (fill('<span class="badge $c">$t</span>', t=t, c=c) for t, c in status), " "
                ),
                calls=number(s["calls"]),
                errs=number(s["errors"]),
                p50=number(lat["p50"]),
                p99=number(lat["p99"]),
                max=number(lat["max"]),
                jobs=join(
                    fill('<td class="num">$v</td>', v=number(jobs.get(k)) if jobs else "…")
                    for k in ("pending", "in_progress", "succeeded", "failed", "total")
                ),
                at=when(s.get("jobs_counted_at_ms")),
            )
        )
        errors.extend(
            fill(
                '<li><strong>$n</strong> $at: <span class="mono">$m</span></li>',
                n=s["name"],
                at=when(e["at_ms"]),
                m=e["message"],
            )
            for e in s["recent_errors"]
        )
    return page(
        "shards.html",
        cap=number(data["jobs_count_cap"]),
        rows=join(rows),
        errors=fill("<ul>$e</ul>", e=join(errors))
        if errors
        else Markup('<p class="muted">none since start</p>'),
    )


def janitor_page(data: Mapping[str, Any]) -> Markup:
    config = kv_table(
        [
            (k, data[k])
            for k in (
                "enabled",
                "interval_seconds",
                "claim_timeout_seconds",
                "succeeded_ttl_seconds",
                "failed_ttl_seconds",
                "batch_size",
            )
        ]
    )
    keys = ("reclaimed_to_pending", "reclaimed_to_failed", "purged_succeeded", "purged_failed")
    rows = join(
        fill(
            '<tr><td>$at</td><td class="num">$s</td>$counts<td>$queues</td>'
            '<td class="error">$err</td></tr>',
            at=when(run["started_at_ms"]),
            s=number(run["seconds"]),
            counts=join(
                fill('<td class="num">$v</td>', v=number(run["counts"].get(k, 0))) for k in keys
            ),
            queues=join((link(queue_url(q), q) for q in run.get("queues", {})), ", "),
            err=run.get("error") or "",
        )
        for run in data["runs"]
    ) or Markup('<tr><td colspan="8" class="muted">no pass yet</td></tr>')
    return page(
        "janitor.html",
        config=config,
        passes=number(data["passes"]),
        totals=kv_table(sorted(data["totals"].items())),
        rows=rows,
    )


def kv_table(items: Sequence[tuple[str, object]]) -> Markup:
    if not items:
        return Markup('<p class="muted">nothing yet</p>')
    return fill(
        '<table class="kv">$rows</table>',
        rows=join(
            fill(
                "<tr><th>$k</th><td>$v</td></tr>",
                k=k.replace("_", " "),
                v=_setting_value(v) if not isinstance(v, Markup) else v,
            )
            for k, v in items
        ),
    )


def error_page(title: str, message: str) -> Markup:
    return page("error.html", title=title, message=message)


def action_forms(queue: str, paused: bool, levels: int) -> Markup:
    """The queue's actions: each opens a confirmation page (GET, with a dry-run count) whose
    form does the POST."""
    confirm = queue_url(queue) + "/confirm"
    priorities = _options([("", "all")] + [(str(p), str(p)) for p in range(1, levels + 1)], "")
    states = _options([(s, _STATE_LABELS[s]) for s in STATES], "failed")
    toggle = "resume" if paused else "pause"
    return fill(
        '<form method="get" action="$confirm" class="inline">'
        '<input type="hidden" name="action" value="$toggle">'
        '<button type="submit" id="action-$toggle">$toggle_label…</button></form>'
        '<form method="get" action="$confirm" class="inline">'
        '<input type="hidden" name="action" value="retry">'
        '<label>priority <select name="priority">$priorities</select></label>'
        '<button type="submit" id="action-retry">Retry failed…</button></form>'
        '<form method="get" action="$confirm" class="inline">'
        '<input type="hidden" name="action" value="delete-jobs">'
        '<label>state <select name="state">$states</select></label>'
        '<label>priority <select name="priority">$priorities</select></label>'
        '<button type="submit" class="danger" id="action-delete-jobs">Delete jobs…</button>'
        "</form>",
        confirm=confirm,
        toggle=toggle,
        toggle_label=toggle.capitalize(),
        priorities=priorities,
        states=states,
    )


def settings_forms(queue: str, settings: Mapping[str, Any], csrf: str) -> Markup:
    """One form per settable setting: a number sets the stored value, empty clears it."""
    forms = []
    for key, label, step in (
        ("max_jobs_per_second", "Rate limit (jobs/s, cluster-wide; 0 pauses)", "any"),
        ("claim_timeout_seconds", "Claim timeout (seconds)", "any"),
    ):
        stored = settings[key].get("stored")
        forms.append(
            fill(
                '<form method="post" action="$url" class="inline setting">'
                '<input type="hidden" name="csrf_token" value="$csrf">'
                '<input type="hidden" name="setting" value="$key">'
                '<label for="set-$key">$label</label>'
                '<input type="number" min="0" step="$step" id="set-$key" name="value" value="$v" '
                'placeholder="empty: clear the stored value">'
                '<button type="submit">Save</button></form>',
                url=queue_url(queue) + "/settings",
                csrf=csrf,
                key=key,
                label=label,
                step=step,
                v="" if stored is None else stored,
            )
        )
    return join(forms)
