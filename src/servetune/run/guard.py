"""The resource guard: a run whose estimate (run/estimate.py) passes a limit stops before
anything heavy is drawn, allocated or compiled, with the estimate and the keys that would
shorten it, unless told to go.

The limits are config keys (conf/config.yaml, `guard.*`): `guard.max_wall_s` (3600 s: an hour;
null for none) of estimated wall time on this machine, and `guard.max_memory_fraction` (0.8)
of the memory available that the estimated peak may take. `guard.confirmed=true`, or `--yes`
on the command line (servetune/cli/main.py turns it into that override), runs it anyway; the
engine's own exact check of the simulator state (engine/memory.check_fits) still applies.

`Guard` is what `servetune simulate` and `servetune.simulate` hand `scenario.build(cfg,
plan=...)`: it estimates the Outline and refuses before the traces are drawn in full, then
`Guard.built` adds the simulator state sized by jax.eval_shape. `Tally` sums several
simulations (a tuning run's iterations x population x scenarios and its evaluation, a
fleet-sizing search's counts) and refuses as soon as their total passes the limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from servetune.config import settings
from servetune.config.outline import Outline
from servetune.config.scenario import MAX_SECONDS, Scenario
from servetune.core.errors import ResourceLimitError
from servetune.engine import memory
from servetune.run import estimate as estimate_lib
from servetune.run.estimate import Estimate

HOUR = 3600.0
_ABSENT = object()
GO = "--yes (guard.confirmed=true)"


@dataclasses.dataclass(frozen=True)
class Limits:
    """The `guard.*` settings."""

    max_wall_s: float | None = HOUR  # estimated wall seconds at most (None: no limit)
    max_memory_fraction: float = memory.USABLE  # of the available memory, at most
    confirmed: bool = False  # run anyway (guard.confirmed, --yes)


def limits(cfg) -> Limits:
    """The `guard.*` keys of `cfg`, checked (ConfigError naming the key); a config without
    them (one composed by hand) gets the defaults. guard.max_wall_s null: no time limit."""
    wall = settings.get(cfg, "guard.max_wall_s", _ABSENT)
    return Limits(
        max_wall_s=HOUR
        if wall is _ABSENT
        else None
        if wall is None
        else settings.check_number(wall, "guard.max_wall_s", lo=1.0, hi=MAX_SECONDS),
        max_memory_fraction=settings.number(
            cfg, "guard.max_memory_fraction", lo=0.01, hi=1.0, default=memory.USABLE
        ),
        confirmed=settings.flag(cfg, "guard.confirmed", False),
    )


def _shown_s(seconds: float) -> str:
    return estimate_lib.duration_shown(seconds)


def check(
    est: Estimate, lim: Limits, what: str, keys: Sequence[str], partial: bool = False
) -> None:
    """ResourceLimitError when `est` passes `lim` (unless lim.confirmed): its message starts with
    `keys` (what would shorten it, most effective first), then says `what` runs, the estimate
    ("or more" where it is `partial`: a sum refused before all its parts were counted) and the
    limit, and how to run it anyway."""
    if lim.confirmed:
        return
    shorten = " / ".join(keys)
    available = memory.host_available_bytes()
    size = estimate_lib.size_shown
    if available is not None and est.peak_bytes > lim.max_memory_fraction * available:
        state = f", the simulator's state ~{size(est.state_bytes)}" if est.state_bytes else ""
        raise ResourceLimitError(
            f"{shorten}: {what} would hold ~{size(est.peak_bytes)} at its peak (its requests' "
            f"host arrays ~{size(est.memory_bytes)}{state}), more than "
            f"guard.max_memory_fraction = {lim.max_memory_fraction:.0%} of the "
            f"{size(available)} available; expected less: lower {_first(keys)}, or run it "
            f"anyway with {GO}"
        )
    if lim.max_wall_s is not None and est.wall_s > lim.max_wall_s:
        limit = f" ({_shown_s(lim.max_wall_s)})" if lim.max_wall_s >= 60 else ""
        more = " or more" if partial else ""
        raise ResourceLimitError(
            f"{shorten}: {what} is estimated at ~{_shown_s(est.wall_s)}{more} on this machine "
            f"({_parts(est)}), more than guard.max_wall_s = {lim.max_wall_s:g} s{limit}; "
            f"expected a shorter run: lower {_first(keys)}, or run it anyway with {GO}"
        )


def _first(keys: Sequence[str]) -> str:
    return " or ".join(keys[:2]) if keys else "the run's size"


def _parts(est: Estimate) -> str:
    """What the estimate is made of, briefly."""
    parts = [f"compiling {_shown_s(est.compile_s)}"] if est.compile_s >= 1 else []
    if est.load is not None and est.load.bodies > 0:
        parts.append(f"{est.load.bodies:,.3g} loop bodies")
    if est.runs:
        parts.append(f"x{est.correction:.2g} from this machine's runs")
    return ", ".join(parts) or "the host's work"


def keys_for(o: Outline) -> tuple[str, ...]:
    """The keys that would shorten a run of `o` (Outline.sized_by), most effective first: the
    instances where there are many (an idle one wakes at every other's iteration), the seeds
    and grid where the scenarios are many, then the span and the requests."""
    keys = list(o.sized_by)
    first = []
    if o.engine.n_instances >= 16:
        first += [k for k in keys if k in ("engine.n_instances", "fleet.max_replicas")]
    if o.scenarios >= 16:
        first += [k for k in keys if k in ("seeds", "grid")]
    return tuple((first + [k for k in keys if k not in first])[:4])


def described(o: Outline) -> str:
    """ "the run (478,575 requests x 1 scenario(s) on 8 instance(s))" """
    return (
        f"the run ({o.requests:,} requests x {o.scenarios} scenario(s) on "
        f"{o.engine.n_instances} instance(s))"
    )


class Guard:
    """The guard of one simulate call: `build(cfg, plan=guard)` calls it with the Outline
    (refused there, before the traces are drawn); `built(scenario)` then adds the simulator
    state and checks again; `estimate` is what the first line states."""

    def __init__(self, cfg, batched: bool = True):
        self.limits = limits(cfg)
        self.batched = batched
        self.estimate: Estimate | None = None
        self.outline: Outline | None = None

    def __call__(self, outline: Outline) -> None:
        est = estimate_lib.simulation(outline, self.batched)
        check(est, self.limits, described(outline), keys_for(outline))
        self.estimate, self.outline = est, outline

    def built(self, scenario: Scenario) -> Estimate:
        """The estimate with the built scenario's simulator state (engine/memory.py: sized
        by jax.eval_shape, nothing allocated), checked."""
        if self.estimate is None:
            assert scenario.outline is not None
            self(scenario.outline)
        assert self.estimate is not None and self.outline is not None
        # the state's own exact check (the driver's, made here before anything compiles),
        # naming what sizes it: the entries, the leap's tables, a fleet's log
        memory.check_fits(scenario.workloads, scenario.params, scenario.engine)
        state = memory.rollout_bytes(scenario.workloads, scenario.params, scenario.engine)
        state -= memory.tree_bytes(scenario.workloads)  # counted with the host arrays
        self.estimate = dataclasses.replace(self.estimate, state_bytes=int(state))
        check(self.estimate, self.limits, described(self.outline), keys_for(self.outline))
        return self.estimate


class Tally:
    """The guard of several simulations one after another: `add(outline, times)` counts
    `times` simulations of `outline` (its compilation once) and refuses as soon as the total
    passes the limit, naming `keys` (what would shorten the whole) and `what` runs."""

    def __init__(self, cfg, what: str, keys: Sequence[str]):
        self.limits = limits(cfg)
        self.what = what
        self.keys = tuple(keys)
        self.total: Estimate | None = None

    def add(
        self, outline: Outline, times: float, batched: bool = False, kind: str | None = None
    ) -> Estimate:
        """Count `times` runs of `outline` (each one scenario, or its whole batch vmapped if
        `batched`), corrected by this machine's `kind` runs, and check the total; returns one
        run's estimate."""
        one = outline if batched else dataclasses.replace(outline, seeds=1, points=1)
        est = estimate_lib.simulation(one, batched, kind=kind)
        again = dataclasses.replace(est, wall_s=est.wall_s - est.compile_s, compile_s=0.0)
        first = dataclasses.replace(est, wall_s=est.compile_s, loop_s=0.0, host_s=0.0)
        total = first if self.total is None else self.total.plus(first)
        self.total = dataclasses.replace(total.plus(again, times), load=None)  # many loads
        check(self.total, self.limits, self.what, self.keys, partial=True)
        return est
