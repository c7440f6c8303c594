"""Human-readable summaries of simulation results."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from servetune.reporting.numbers import fmt
from servetune.run import energy


def summary(
    metrics: dict, labels: dict, title: str = "servetune simulate", console: Console | None = None
) -> None:
    """Print what was simulated (hardware, price, policy, SLOs: a header a pasted summary is
    understood by), then one scenario's key metrics and its per-class breakdown."""
    console = console or Console()
    console.print(f"[bold]{title}[/bold]")
    lines = [_hardware_line(labels), _policy_line(labels), _slo_line(labels)]
    if labels.get("step_times"):  # what kind of engine, its step times (config/engine_words.py)
        lines.insert(1, f"step times: {labels['step_times']}")
    if labels.get("engine"):
        lines.insert(1, labels["engine"])
    if labels.get("simulated"):
        lines.insert(1, f"simulates {labels['simulated']}")
    lines += _cost_lines(labels)
    for line in lines:
        console.print(f"  {line}", highlight=False)
    m = metrics
    t = Table(show_header=False, box=None, padding=(0, 2))
    t.add_column("metric", style="bold")
    t.add_column("value", justify="right")
    rows = [
        ("requests counted (offered rps)", f"{m['n_requests']} ({fmt(m['offered_rps'])}/s)"),
        (
            "completed / rejected / outstanding",
            f"{m['n_completed']} / {m['n_rejected']}{_reasons(m)} / {m['n_outstanding']}",
        ),
        (
            "TTFT mean / p50 / p99 (s)",
            " / ".join(fmt(m[f"ttft_{q}_s"]) for q in ("mean", "p50", "p99")),
        ),
        (
            "TPOT mean / p50 / p99 (s)",
            " / ".join(fmt(m[f"tpot_{q}_s"]) for q in ("mean", "p50", "p99")),
        ),
        ("ITL p50 / p99 (s)", f"{fmt(m['itl_p50_s'])} / {fmt(m['itl_p99_s'])}"),
        ("E2E mean / p99 (s)", f"{fmt(m['e2e_mean_s'])} / {fmt(m['e2e_p99_s'])}"),
        (
            "throughput (req/s, output tok/s)",
            f"{fmt(m['throughput_rps'])}, {m['output_tokens_per_s']:,.0f}",
        ),
        ("service rate in the window (req/s)", fmt(m["service_rate_rps"])),
        (
            "goodput (req/s) / SLO attainment",
            f"{fmt(m['goodput_rps'])} / {m['slo_attainment']:.1%}",
        ),
        ("useful tokens per dollar", f"{m['useful_tokens_per_dollar']:,.0f}"),
        (
            "cost (USD) / per qualifying request",
            f"{m['cost_usd']:.3f} / {fmt(m['cost_per_qualifying_request_usd'])}",
        ),
        (
            "busy fraction / KV peak occupancy",
            f"{m['busy_fraction']:.1%} / {m['kv_peak_occupancy']:.1%}",
        ),
        ("preemptions / wasted token ratio", f"{m['preemptions']} / {m['wasted_token_ratio']:.2%}"),
        *_energy_rows(m),
        ("iterations / simulated time (s)", f"{m['iterations']:,} / {m['sim_duration_s']:.1f}"),
    ]
    if "mean_replicas" in m:  # an autoscaled fleet (engine/autoscale.py)
        rows.append(
            (
                "replicas mean / peak / starts (cold-start USD)",
                f"{m['mean_replicas']:.2f} / {m['peak_replicas']:.0f} / {m['scale_ups']} "
                f"({m['cold_start_cost_usd']:.3f})",
            )
        )
        if m["spot_replica_hours"] or m["requests_requeued"]:
            rows.append(
                (
                    "spot replica-hours / preemptions / re-queued",
                    f"{m['spot_replica_hours']:.2f} / {m['spot_preemptions']} / "
                    f"{m['requests_requeued']}",
                )
            )
    if "prefix_hit_rate" in m:  # prefix caching
        rows.append(
            (
                "prefix hit rate / evictions",
                f"{m['prefix_hit_rate']:.1%} / {m['prefix_evictions']:,}",
            )
        )
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)
    if m.get("by_class"):
        c = Table(title="by class", show_header=True, box=None, padding=(0, 1))
        c.add_column("class", justify="right", no_wrap=True, min_width=14)
        for col in ("requests", "completed", "SLO att.", "TTFT p99 s", "TPOT p99 s", "E2E mean s"):
            c.add_column(col, justify="right")
        for name, v in m["by_class"].items():
            c.add_row(
                name,
                str(v["n_requests"]),
                str(v["n_completed"]),
                f"{v['slo_attainment']:.1%}",
                fmt(v["ttft_p99_s"]),
                fmt(v["tpot_p99_s"]),
                fmt(v["e2e_mean_s"]),
            )
        console.print(c)
    flags = []
    if m.get("queue_window_overflow"):
        flags.append(
            f"queue window overflow: up to {m['queue_window_overflow']} arrivals waited "
            f"outside the scheduler's window (raise engine.queue_window)"
        )
    if m.get("slot_bound_iterations"):
        flags.append(
            f"capacity bound: in {m['slot_bound_iterations']} iterations "
            f"engine.max_slots, "
            f"not policy.max_num_seqs, held back admissions (raise engine.max_slots, or "
            f"null for exact results)"
        )
    if m.get("stalled"):
        flags.append("STALLED: waiting requests could never be scheduled")
    backlog = _backlog_note(m)
    if backlog:
        flags.append(backlog)
    for f in flags:
        console.print(f"[yellow]note:[/yellow] {f}")


OUTSTANDING_NOTE = 0.05  # a share of counted requests left outstanding worth a note


def _backlog_note(m: dict) -> str | None:
    """A note where more than OUTSTANDING_NOTE of the counted requests were still outstanding
    when the run ended (the engine, or the fleet, did not keep up), naming what would show
    more and, with spot replicas, what their preemptions did; None otherwise."""
    n, left = m.get("n_requests") or 0, m.get("n_outstanding") or 0
    if not n or left <= OUTSTANDING_NOTE * n:
        return None
    note = (
        f"{left:,} of {n:,} requests ({left / n:.0%}) were still outstanding when the run "
        f"ended: the engine did not keep up (window.drain_s sets how long it drains)"
    )
    if m.get("spot_preemptions"):
        note += (
            f"; {m['spot_preemptions']:,} spot preemptions re-queued "
            f"{m.get('requests_requeued', 0):,} requests and kept replicas cold "
            f"(fleet.spot_preemptions_per_hour, fleet.spot_share)"
        )
    return note


# why a request was rejected, as a reader would fix it (types.REJECT_REASON_NAMES)
REJECT_HINTS = {
    "too_long": "prompt >= engine.max_model_len",
    "kv_capacity": "could never fit the KV cache",
    "queue_cap": "policy.queue_cap full",
    "max_num_queued_reqs": "policy.max_num_queued_reqs full",
    "max_num_queued_tokens": "policy.max_num_queued_tokens full",
    "kv_reserve": "engine.kv_pressure=reject",
}


def _reasons(m: dict) -> str:
    """' (too_long 3: prompt >= engine.max_model_len; ...)' for metrics.rejected_by, or ''."""
    by = m.get("rejected_by") or {}
    return (
        " (" + "; ".join(f"{k} {n}: {REJECT_HINTS.get(k, k)}" for k, n in by.items()) + ")"
        if by
        else ""
    )


def _hardware_line(labels: dict) -> str:
    """'workload | model on [I instances of] TP x GPU | KV blocks | price'."""
    instances = labels.get("instances") or 1
    where = f"{labels.get('tp')} x {labels.get('gpu')}"
    if instances > 1:
        split = labels.get("prefill_instances") or 0
        where = f"{instances} instances of {where}" + (
            f" ({split} prefill, {instances - split} decode)" if split else ""
        )
    line = (
        f"{labels.get('workload')} | {labels.get('model')} on {where} | "
        f"{labels.get('kv_blocks')} KV blocks per instance"
    )
    price = labels.get("price_per_gpu_hour")
    return line + ("" if price is None else f" | ${fmt(price)}/GPU-hour")


def _policy_line(labels: dict) -> str:
    """'order fcfs | max_num_seqs 256 | ...': the first policy point's vLLM knobs (no limit
    shown as such)."""
    knobs = labels.get("policy") or {}
    shown = [f"order {labels.get('order')}"]
    shown += [f"{k} {'none' if v == float('inf') else fmt(v)}" for k, v in knobs.items()]
    return " | ".join(shown)


def _slo_line(labels: dict) -> str:
    """'SLOs: TTFT <= 2 s, TPOT <= 0.1 s' (the targets set), or ''."""
    slo = labels.get("slo") or {}
    names = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}
    set_ = [f"{names[k]} <= {fmt(v)} s" for k, v in slo.items() if v is not None]
    return "SLOs: " + ", ".join(set_) if set_ else "SLOs: none (every completed request counts)"


def grid_summary(table, console: Console | None = None, max_rows: int = 20) -> None:
    """Print the per-scenario table of a batch: the first `max_rows` rows, saying how many were
    left out."""
    console = console or Console()
    cols = [c for c in table.columns if c == "seed" or c.startswith("policy.")]
    cols += [
        "goodput_rps",
        "slo_attainment",
        "ttft_p99_s",
        "tpot_p99_s",
        "useful_tokens_per_dollar",
        "preemptions",
    ]
    t = Table(title=f"{len(table)} scenarios", show_header=True)
    for c in cols:
        t.add_column(c, justify="right", overflow="fold")
    for _, row in table.head(max_rows).iterrows():
        t.add_row(*(fmt(row[c]) for c in cols))
    if len(table) > max_rows:
        t.caption = (
            f"first {max_rows} of {len(table)} scenarios; {len(table) - max_rows} left "
            f"out here, all in metrics.csv"
        )
    console.print(t)


def _energy_rows(m: dict) -> list[tuple[str, str]]:
    """The run's energy (run/energy.py): kWh, joules per useful token and mean power; its cost
    and share of the cost when electricity has a price."""
    if "energy_j" not in m:
        return []
    rows = [
        (
            "energy (kWh) / J per useful token / mean W",
            f"{m['energy_j'] / energy.JOULES_PER_KWH:.3g} / {fmt(m['joules_per_useful_token'])} / "
            f"{m['mean_power_w']:,.0f}",
        )
    ]
    if m["energy_cost_usd"] > 0:
        rows.append(
            (
                "energy cost (USD) / share of cost",
                f"{m['energy_cost_usd']:.3f} / {m['energy_cost_share']:.1%}",
            )
        )
    return rows


def _cost_lines(labels: dict) -> list[str]:
    """cost=aic: where the step times come from and how well the fit follows them, and where
    the policy lets a batch grow beyond the fitted ones; nothing for the other cost forms."""
    if not labels.get("cost_model"):
        return []
    lines = [f"step times: {labels['cost_model']}"]
    return lines + [f"[yellow]warning:[/yellow] {w}" for w in labels.get("cost_warnings", ())]
