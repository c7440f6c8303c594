"""servetune/engine/width.py's device check on a hand-built state: the entries the next loop body
may need, against what a narrow program holds."""

import jax
from helpers import linear_params, trace_of
from toy import config, entries, running

from servetune.config.scenario import stack_workloads
from servetune.core.types import DONE
from servetune.engine import width
from servetune.engine.loop import init_state


def test_need_is_the_entries_held_plus_the_arrivals_the_next_body_takes():
    cfg = config(width=4)  # 8 entries at full width
    tr = trace_of([(0.0, 4, 2), (0.5, 4, 2), (1.0, 4, 2), (2.0, 4, 2)])
    wl = jax.tree.map(lambda x: x[0], stack_workloads([tr], [tr.output * 1.0], 1e6, cfg))
    params = linear_params()
    state = init_state(wl, params, cfg)
    held = entries(cfg, [running(4, 2, generated=1, req=0), {"status": DONE, "req": 5}])
    # the instance's clock at 1.0 with request 0 taken: requests 1 and 2 arrive by then
    state = state.replace(
        entries=jax.tree.map(lambda x: x[None], held), next_req=1, clock=state.clock + 1.0
    )
    assert int(width.need(state, wl, cfg)) == 2 + 2
    assert bool(width.fits(state, wl, cfg)) and int(width.shortfall(state, wl, cfg)) == 0
    later = state.replace(clock=state.clock + 1.0)  # at 2.0 the fourth has arrived too
    assert int(width.need(later, wl, cfg)) == 5 and not bool(width.fits(later, wl, cfg))
    assert int(width.shortfall(later, wl, cfg)) == 5
    assert int(width.shortfall(later.replace(done=True), wl, cfg)) == 0
    wide = width.start(cfg, None)  # the full width fits by definition: overflow waits outside
    assert bool(width.fits(later, wl, wide)) and int(width.shortfall(later, wl, wide)) == 0
