"""State and parameter dataclasses of the simulator.

Shapes use these letters:
  N  requests in the (padded) workload
  A  active entries of one instance (running slots + queue window)
  I  instances (replicas, P/D pools, cascade tiers)
  R  outbox capacity (finished-request records awaiting collection by the host)
  H  bins of the inter-token-latency histogram
  m  order-swap partners recorded per admission (SWAP_PARTNERS; relaxed order,
     engine/relaxed/swap.py)
Times are float64 seconds; token counts are int32.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import struct

# Entry status inside an instance's active set. With prefill/decode disaggregation
# (engine/disagg.py): HANDOFF, prefilled on a prefill instance and waiting for a decode instance
# with room; INFLIGHT, on a decode instance with its KV still on the link (until ready_at).
# With a model cascade (engine/cascade.py): RETRY, a small-model answer that failed its check,
# waiting on its small instance to move to a large one; there it is INFLIGHT until ready_at
# (the check's result), then joins the queue.
EMPTY, WAITING, RUNNING, DONE, HANDOFF, INFLIGHT, RETRY = 0, 1, 2, 3, 4, 5, 6

# How a request ended. OUTSTANDING is assigned after the loop to what is unfinished. EVICTED:
# dropped under KV pressure (engine.kv_pressure=evict), its compute wasted.
COMPLETED, REJECTED, CANCELLED, EXPIRED, OUTSTANDING, EVICTED = 0, 1, 2, 3, 4, 5
END_STATE_NAMES = ("completed", "rejected", "cancelled", "expired", "outstanding", "evicted")

# Why a request was rejected (its record's reject_reason; -1: not rejected). On arrival, in
# this order of precedence: a prompt of max_model_len tokens or more (vLLM's input check), a
# request that could never fit the KV cache, the gateway's queue_cap, vLLM's API-server caps
# max_num_queued_reqs and max_num_queued_tokens (HTTP 503); at admission, a predicted KV
# footprint that does not fit (engine.kv_pressure=reject).
(
    REJECT_TOO_LONG,
    REJECT_KV_CAPACITY,
    REJECT_QUEUE_CAP,
    REJECT_QUEUED_REQS,
    REJECT_QUEUED_TOKENS,
    REJECT_KV_RESERVE,
) = range(6)
REJECT_REASON_NAMES = (
    "too_long",
    "kv_capacity",
    "queue_cap",
    "max_num_queued_reqs",
    "max_num_queued_tokens",
    "kv_reserve",
)

# The columns of Stats.work, what the roofline step time is computed from (cost.step_time):
# summed over an instance's iterations, they give its model FLOPs and bytes (metrics.py).
WORK_COLUMNS = ("iterations", "tokens", "ctx_read", "attn_work")

# The columns of a timeline sample (Timeline.samples, output.timeline): the start of the step
# (seconds), then after it: requests waiting and running on the instance, tokens the step's
# iteration computed, KV blocks in use, preemptions so far (the scenario's).
# Autoscaling (engine/autoscale.py): a replica's phase, and the columns of the fleet's log
REPLICA_OFF, REPLICA_SERVING, REPLICA_DRAINING = 0, 1, 2
# (spot: provisioned replicas that are spot, priced at fleet.spot_price_ratio of on-demand)
FLEET_LOG_COLUMNS = ("t_s", "provisioned", "cold", "draining", "desired", "spot")
AUTOSCALE_METRICS = ("num_requests_waiting", "num_requests_running", "kv_cache_usage_perc")

TIMELINE_COLUMNS = ("t_s", "queue_len", "running", "batch_tokens", "kv_blocks", "preemptions")

# Model cascade: the tier a request was served on. LARGE: routed to the large pool; SMALL:
# routed to the small pool (its answer is final unless it fails its check); RETRIED: routed to
# the small pool, failed its check there, and served again on the large pool.
TIER_LARGE, TIER_SMALL, TIER_RETRIED = 0, 1, 2

# A relaxed priority order (engine/relaxed/swap.py): waiting partners recorded per admitted request.
SWAP_PARTNERS = 4


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """Static (structural) engine configuration. Changing any field recompiles.

    Attributes:
      max_slots: capacity for running requests. Below max_num_seqs it caps the running set;
        iterations where that changed an admission are counted (`slot_bound_iterations`).
      queue_window: capacity for waiting requests visible to the scheduler. Arrivals beyond it
        wait, in trace order, outside the window (counted as `window_overflow`), never dropped.
      width: entries per instance this program holds, when fewer than max_slots +
        queue_window (servetune/engine/width.py: a narrow program stops a scenario before a loop
        body that could need more, and the host widens it); 0 = all of them (the full width).
      block_size: tokens per KV-cache block.
      max_model_len: longest sequence (prompt + output tokens) the engine accepts.
      batching: "continuous" (iteration-level) or "static" (batch held until all finish).
      kv_layout: "paged" (blocks on demand) or "contiguous" (max_model_len reserved at admission).
      chunked_prefill: split long prompts across iterations under the token budget.
      cost_form: "roofline" or "linear" step-time model.
      outbox: records buffered on device between host collections.
      drain_per_step: finished requests moved to the outbox per iteration at most (the rest
        leave in later iterations; more costs time in every iteration).
      max_steps_per_chunk: iterations per compiled call before control returns to the host.
      chunk_length: L > 0 runs each compiled call as exactly L loop bodies (a fixed-length
        loop; bodies of scenarios that are done do nothing), so a GPU does not return to the
        host after every body to test the loop's condition; 0 = a while loop until done.
      n_instances: engine replicas in the simulation, each with its own clock, batch and KV
        cache (cost params may carry an instance axis [I] for different GPUs or models).
      routing: how arrivals are assigned to instances (engine/routing.py): round_robin, jsq,
        least_kv, p2c or score.
      route_window: most arrivals routed per iteration (more wait outside, counted).
      prefill_instances: P > 0 disaggregates: instances 0..P-1 only prefill (arrivals are
        routed to them), the rest only decode; a prefilled request's KV moves over the link
        (engine/disagg.py). 0 = every instance does both (colocated).
      leap_max: most uniform decode iterations advanced at once in closed form (event
        skipping, engine/leap.py); 0 steps every iteration.
      lazy_order: skip the priority sort in iterations where order cannot matter (exact; off
        only to test that it is).
      fast_path: take the simple step (servetune/engine/simple_step.py) for iterations where only
        decodes and one arrival admitted at once can happen (exact; off only to test that
        it is).
      abandonment: requests may end early, cancelled by their client or expired at their
        deadline (engine/abandon.py); off, the engine never checks (the workload has none).
      speculation: a draft model proposes policy.spec_k tokens per decoding request per
        iteration (engine/speculation.py); params.draft holds its cost. The leap is off
        with it (iterations are no longer uniform).
      kv_pressure: what gives when running requests need more KV blocks than are free
        (engine/pressure.py): "preempt" (vLLM: recompute later), "evict" (drop the lowest-value
        request), "compress" (compress the KV of low-priority requests), "reject" (reserve
        predicted footprints at admission and reject new work that does not fit).
      prefix_cache: automatic prefix caching (vLLM APC, engine/prefix.py): full prompt blocks
        are shared between requests through a cache table, evicted LRU under KV pressure.
      prefix_cache_entries: capacity of the cache table, in prefix blocks (a multiple of
        engine/prefix.py's WAYS).
      prefix_block_tokens: tokens per prefix block, the granularity of the trace's prefix ids
        (Mooncake: 512); a multiple of block_size.
      relax: how tunable decisions weigh in the times the engine computes (servetune/core/relax.py):
        "hard" (exact, what every report uses), "st" (exact forward pass, straight-through sigmoid
        derivative) or "soft" (fluid weights); the last two only for pathwise gradients
        (servetune/tuning/estimators/pathwise_gradient.py), with the preempt policy, no prefix cache
        and no prefill/decode disaggregation.
      relax_temperature: tau of the st/soft sigmoids, in units of each gate's scale.
      relax_order: also relax the priority order among waiting requests (pair swaps at the
        admission boundary, engine/relaxed/swap.py, O(queue_window^2) per iteration): for gradients
        in the priority weights.
      scheduler_reserve_full_isl: vLLM 0.32's admission rule (`--scheduler-reserve-full-isl`,
        default on): a waiting request is admitted only if blocks for its whole prompt (plus
        the tokens it already generated, if preempted) fit above the watermark; off, only its
        first chunk's blocks must fit (vLLM before 0.32).
      long_prefill_token_threshold_adaptive: floor policy.long_prefill_token_threshold at
        max_num_batched_tokens // (running + waiting requests), as vLLM 0.32's
        `--long-prefill-token-threshold-adaptive`.
      timeline_samples: T > 0 records a timeline (Timeline): of each instance's steps that
        start in one of T periods of Workload.timeline_dt seconds, the latest; 0 (the default)
        records none and costs the loop nothing.
      scheduling_policy: vLLM's `--scheduling-policy`. "fcfs" orders by policy.order's score
        (vLLM's own FCFS queue when the score is arrival alone); "priority" (policy.order
        priority) is vLLM 0.32's priority policy over each request's fixed priority from the
        trace: the queue, preempted requests included, by (priority, arrival), and the
        preemption victim the running request with the largest (priority, arrival)
        (engine/priority.py).
      async_scheduling: vLLM's `--async-scheduling` (engine/async_scheduling.py): step k+1 is
        planned while step k runs, so it sees arrivals only up to step k's start, and requests
        finishing in step k still hold their KV blocks and running place while it is planned.
        The leap and the simple step are off with it.
      stream_interval: vLLM's `--stream-interval` (output_processor.py, 0.32): a request's
        tokens reach the client in chunks, the first token at once, then every
        stream_interval tokens and at its end; the inter-token latencies are the chunks' gaps
        (engine/advance.py). The leap and the simple step are off above 1.
      vllm_version: the vLLM release whose scheduling rules are simulated, "0.32" (the
        default) or "0.33" (a request that preempts itself under the priority policy no longer
        ends the scan of the running list: engine/priority.py).
      autoscale: an autoscaler (engine/autoscale.py, Kubernetes HPA semantics) turns the
        n_instances replicas on and off between params.fleet's min and max replicas; off (the
        default), every instance serves throughout and the program has no fleet state.
      autoscale_metric: the vLLM gauge it scales on, per replica: "num_requests_waiting",
        "num_requests_running" or "kv_cache_usage_perc" (a fraction of KV blocks in use).
      autoscale_history: recommendations kept for the stabilization windows (the longest
        window must fit: history x interval seconds).
      autoscale_log: rows of the fleet's log (Fleet.log: one per evaluation and per replica
        that finished draining); the run stops with an error when they run out.
      autoscale_requeue: a replica scaled down leaves at once, its waiting and running
        requests re-queued to the serving replicas (they start over there); off (the default),
        it drains gracefully, as vLLM's graceful shutdown does.
      autoscale_spot: some replicas are spot (params.fleet.spot_share) and are preempted at
        params.fleet.spot_preemptions_per_hour; their requests are re-queued.
      cascade_small_instances: S > 0 runs a model cascade (engine/cascade.py): instances
        0..S-1 serve a small model, the rest a large one; arrivals whose predicted difficulty
        is at most policy.cascade_threshold go to the small pool, the others to the large pool,
        and a small answer that fails its check is retried on the large pool. 0 = off.
    """

    max_slots: int = 256
    queue_window: int = 256
    block_size: int = 16
    max_model_len: int = 8192
    batching: str = "continuous"
    kv_layout: str = "paged"
    chunked_prefill: bool = True
    cost_form: str = "roofline"
    outbox: int = 2048
    drain_per_step: int = 8
    leap_max: int = 64
    max_steps_per_chunk: int = 200_000
    chunk_length: int = 0
    n_instances: int = 1
    lazy_order: bool = True
    fast_path: bool = True
    abandonment: bool = False
    speculation: bool = False
    kv_pressure: str = "preempt"
    routing: str = "round_robin"
    route_window: int = 64
    prefill_instances: int = 0
    prefix_cache: bool = False
    prefix_cache_entries: int = 1024
    prefix_block_tokens: int = 512
    relax: str = "hard"
    relax_temperature: float = 1.0
    relax_order: bool = False
    cascade_small_instances: int = 0
    scheduler_reserve_full_isl: bool = True
    long_prefill_token_threshold_adaptive: bool = False
    scheduling_policy: str = "fcfs"
    async_scheduling: bool = False
    stream_interval: int = 1
    vllm_version: str = "0.32"
    autoscale: bool = False
    autoscale_metric: str = "num_requests_waiting"
    autoscale_history: int = 64
    autoscale_log: int = 0
    autoscale_requeue: bool = False
    autoscale_spot: bool = False
    timeline_samples: int = 0  # periods of the per-iteration timeline (output.timeline); 0 = off
    width: int = 0

    @property
    def full_width(self) -> int:
        """Entries of an instance's active set at the configured capacity."""
        return self.max_slots + self.queue_window

    @property
    def n_entries(self) -> int:
        """A: entries of an instance's active set in this program (`width`, or the full
        width)."""
        return self.width if 0 < self.width < self.full_width else self.full_width

    @property
    def max_blocks_per_request(self) -> int:
        """Blocks reserved per request under contiguous KV layout."""
        return -(-self.max_model_len // self.block_size)

    @property
    def prefix_width(self) -> int:
        """Hp: prefix blocks tracked per request (full blocks of the longest prompt)."""
        return max(1, self.max_model_len // self.prefix_block_tokens)


class PolicyParams(struct.PyTreeNode):
    """Tunable scheduler and admission parameters: traced float leaves, scalar or batched.

    Integer limits are continuous thresholds here and rounded only when exported.
    Priority score (higher runs first) =
      w_age * age_s - w_prompt * prompt_ktok - w_pred * predicted_output_ktok
      - w_slack * ttft_slack_s
    """

    max_num_seqs: jnp.ndarray  # [] sequences running at once
    max_num_batched_tokens: jnp.ndarray  # [] tokens per iteration
    watermark: jnp.ndarray  # [] fraction of all KV blocks (vLLM's count, the null block
    #                         included; floored to whole blocks) kept free when admitting while
    #                         requests are running (vLLM 0.32 `--watermark`)
    queue_cap: jnp.ndarray  # [] max waiting requests; arrivals beyond are rejected (inf = none;
    #                         a gateway's cap, not a vLLM flag)
    max_num_queued_reqs: jnp.ndarray  # [] vLLM's API-server cap on unfinished (waiting +
    #                                   running) requests; an arrival beyond it gets HTTP 503
    #                                   (rejected; inf = none)
    max_num_queued_tokens: jnp.ndarray  # [] vLLM's API-server cap on the prompt tokens of
    #                                     requests without a first token; an arrival that finds
    #                                     at least this many is rejected (inf = none)
    max_num_active_seqs: jnp.ndarray  # [] vLLM's cap on requests admitted into RUNNING, below
    #                                   max_num_seqs (inf = max_num_seqs)
    long_prefill_token_threshold: jnp.ndarray  # [] most prompt tokens one request computes per
    #                                            iteration unless it is the only request
    #                                            (0 = off; vLLM's flag of the same name)
    w_age: jnp.ndarray  # [] priority weight per second waited since arrival
    w_prompt: jnp.ndarray  # [] priority weight per 1000 prompt tokens (shorter first)
    w_pred: jnp.ndarray  # [] priority weight per 1000 predicted output tokens (shorter first)
    w_slack: jnp.ndarray  # [] priority weight per second of TTFT slack (less slack first)
    ttft_target_s: jnp.ndarray  # [] TTFT target used for slack (seconds)
    spec_k: jnp.ndarray  # [] draft tokens proposed per decoding request per iteration
    #                      (speculative decoding; floored; 0 = off)
    kv_compress_ratio: jnp.ndarray  # [] KV bytes per token shrink by this factor for requests
    #                                 compressed under pressure (engine.kv_pressure=compress)
    route_w_queue: jnp.ndarray  # [] routing score weight per request in an instance
    route_w_kv: jnp.ndarray  # [] routing score weight per fraction of KV blocks in use
    route_w_work: jnp.ndarray  # [] routing score weight per 1000 tokens of predicted work
    cascade_threshold: jnp.ndarray  # [] model cascade: predicted difficulty (in [0, 1]) at or
    #                                 below which a request goes to the small model's pool
    score_net: jnp.ndarray | None = None  # [W] flat weights of the neural priority score
    #                                     (engine/neural.py; None = the linear score alone)


class CostParams(struct.PyTreeNode):
    """Per-iteration step-time model and KV capacity of one instance: traced leaves.

    Roofline: max(flops / flops_rate, bytes / byte_rate) + overhead_s + all-reduce time.
    Linear: base_s + per_prefill_token_s * P + per_decode_seq_s * D + per_ctx_token_s * ctx
    + per_attn_work_s * attn_work (new tokens x context, tokens^2).
    """

    flops_per_token: jnp.ndarray  # [] dense FLOPs per token (2 x parameters)
    attn_flops_per_token_ctx: jnp.ndarray  # [] attention FLOPs per (new token x context token)
    weight_bytes: jnp.ndarray  # [] bytes of weights read per iteration (whole model)
    kv_bytes_per_token: jnp.ndarray  # [] KV-cache bytes per token (all layers)
    flops_rate: jnp.ndarray  # [] effective FLOP/s of the instance (all GPUs)
    byte_rate: jnp.ndarray  # [] effective HBM bytes/s of the instance (all GPUs)
    overhead_s: jnp.ndarray  # [] fixed per-iteration overhead (seconds)
    comm_s_per_token: jnp.ndarray  # [] tensor-parallel all-reduce seconds per batched token
    comm_fixed_s: jnp.ndarray  # [] tensor-parallel all-reduce latency per iteration (seconds)
    base_s: jnp.ndarray  # [] linear form: seconds per iteration
    per_prefill_token_s: jnp.ndarray  # [] linear form: seconds per prefill token
    per_decode_seq_s: jnp.ndarray  # [] linear form: seconds per decoding sequence
    per_ctx_token_s: jnp.ndarray  # [] linear form: seconds per context token attended
    per_attn_work_s: jnp.ndarray  # [] linear form: seconds per unit of attention work
    #                               (a new token x a context token it attends to)
    kv_blocks: jnp.ndarray  # [] KV-cache blocks of the instance (int)
    link_bytes_per_s: jnp.ndarray | float = 25e9  # [] KV transfer bandwidth out of the instance
    #                                       (disaggregation; default 200 Gb/s InfiniBand)
    link_latency_s: jnp.ndarray | float = 1e-4  # [] fixed seconds per KV transfer
    check_latency_s: jnp.ndarray | float = (
        0.0  # [] model cascade: seconds from a small answer's end to
    )
    #                                     its check's verdict (a failed one is retried then)


class FleetParams(struct.PyTreeNode):
    """The autoscaler's tunable numbers (engine/autoscale.py), as Kubernetes' HPA names them:
    traced float leaves, scalar or batched [P]. Counts are whole numbers held as floats."""

    min_replicas: jnp.ndarray  # [] fewest replicas provisioned (>= 1)
    max_replicas: jnp.ndarray  # [] most replicas provisioned (<= engine.n_instances)
    target: jnp.ndarray  # [] target average of the metric per replica (AverageValue)
    tolerance: jnp.ndarray  # [] no scaling while |sum / (target x replicas) - 1| <= tolerance
    interval_s: jnp.ndarray  # [] seconds between evaluations (HPA's sync period)
    scale_up_window_s: jnp.ndarray  # [] scale-up stabilization window (seconds)
    scale_down_window_s: jnp.ndarray  # [] scale-down stabilization window (seconds)
    scale_up_pods: jnp.ndarray  # [] Pods policy: replicas added per evaluation at most
    scale_up_percent: jnp.ndarray  # [] Percent policy: % of replicas added per evaluation
    scale_down_pods: jnp.ndarray  # [] Pods policy: replicas removed per evaluation at most
    scale_down_percent: jnp.ndarray  # [] Percent policy: % of replicas removed per evaluation
    cold_start_s: jnp.ndarray  # [] seconds from a scale-up to the replica serving
    spot_share: jnp.ndarray  # [] share of the replicas that are spot, in [0, 1] (replica i is
    #                          spot where floor((i + 1) x share) > floor(i x share))
    spot_preemptions_per_hour: jnp.ndarray  # [] preemptions per spot replica-hour serving


class Params(struct.PyTreeNode):
    """Everything traced that a scenario can vary without recompiling."""

    policy: PolicyParams
    cost: CostParams
    draft: CostParams | None = None  # the draft model's step cost (speculation), else None
    fleet: FleetParams | None = None  # the autoscaler's numbers (engine.autoscale), else None


class Workload(struct.PyTreeNode):
    """Arrival-sorted request arrays of one scenario, padded to N with arrival = +inf."""

    arrival: jnp.ndarray  # [N] f64 arrival time (seconds)
    arrival_cumsum: jnp.ndarray  # [N] f64 running sum of arrival times (for occupancy integrals)
    prompt: jnp.ndarray  # [N] i32 prompt tokens
    output: jnp.ndarray  # [N] i32 true output tokens (hidden from the scheduler)
    predicted: jnp.ndarray  # [N] f64 predicted output tokens (what the scheduler sees)
    klass: jnp.ndarray  # [N] i32 request class id (per-class mechanisms; metrics use the host copy)
    n: jnp.ndarray  # [] i32 number of real (unpadded) requests
    t_stop: jnp.ndarray  # [] f64 time at which the simulation stops (last arrival + drain)
    give_up_at: jnp.ndarray  # [N] f64 time the request is cancelled or expires if not done
    #                          (seconds; inf = never)
    give_up_state: jnp.ndarray  # [N] i32 CANCELLED or EXPIRED: how it ends at give_up_at
    spec_alpha: jnp.ndarray  # [N] f64 per-token draft acceptance rate (speculation)
    salt: jnp.ndarray  # [] u32 scenario seed for counter-based random draws
    # prefix caching only (engine/prefix.py), else None:
    prefix_ids: jnp.ndarray | None = None  # [N, Hp] i32 ids of the full prompt prefix blocks,
    #                                        -1 after
    # model cascade only (engine/cascade.py), else None:
    cascade_pred: jnp.ndarray | None = None  # [N] f64 predicted difficulty in (0, 1) (the router's)
    cascade_fail: jnp.ndarray | None = None  # [N] bool the small model's answer fails its check
    # engine.scheduling_policy priority only (engine/priority.py), else None:
    priority: jnp.ndarray | None = None  # [N] i32 the request's fixed priority (lower first)
    # a timeline only (engine.timeline_samples > 0), else None:
    timeline_dt: jnp.ndarray | None = None  # [] f64 seconds per timeline period


class Timeline(struct.PyTreeNode):
    """A scenario's sampled timeline (engine.timeline_samples = T periods of
    Workload.timeline_dt seconds): per period and instance, the latest step that started in it."""

    samples: jnp.ndarray  # [T, I, 6] f64 TIMELINE_COLUMNS of that step (nan: no step started)


class PrefixRefs(struct.PyTreeNode):
    """Prefix caching (engine/prefix.py): the cached prompt blocks each entry's request uses."""

    ids: jnp.ndarray  # [A, Hp] i32 the request's full prompt block ids, -1 after
    slot: jnp.ndarray  # [A, Hp] i32 cache-table slot of each block it references, -1
    n: jnp.ndarray  # [A] i32 blocks it references (KV counted once, in the cache)
    next: jnp.ndarray  # [A] i32 next block to insert into the cache


class RelaxTape(struct.PyTreeNode):
    """A relaxed engine's per-request tapes (engine.relax st/soft; servetune/grad), 0 on
    arrival."""

    wait_z: jnp.ndarray  # [A] f64 sum of the admission perturbations of the iterations it
    #                      waited through since it last queued
    wait_zt: jnp.ndarray  # [A] f64 the same, each times its iteration's start (s)
    shift: jnp.ndarray  # [A] f64 seconds its later events move by: its admissions' expected
    #                     time shift (0 in value under st; engine/relaxed/shift.py)
    debt: jnp.ndarray  # [A] f64 tokens computed ahead under perturbations, owed back at its
    #                    prompt's last chunk, or its next iteration that computes when not
    #                    prefilling (engine/relaxed/batch.py)
    ahead: jnp.ndarray  # [A] f64 prompt tokens a relaxed budget computed for it beyond the
    #                     exact ones in its current prefill (engine/relaxed/pace.py)
    pre_s: (
        jnp.ndarray
    )  # [A] f64 its share of the seconds of its current prefill (engine/relaxed/pace.py)
    pre_tok: jnp.ndarray  # [A] f64 prompt tokens computed in its current prefill


class SwapTape(struct.PyTreeNode):
    """A relaxed priority order (engine.relax_order, engine/relaxed/swap.py): each request's latest
    admission and preemption; it leaves with the request's record (engine/outbox.py)."""

    admitted_at: jnp.ndarray  # [A] f64 time of its latest admission (s; nan before)
    swap_req: jnp.ndarray  # [A, m] i32 requests that admission passed over (-1 none)
    swap_p: jnp.ndarray  # [A, m] f64 their pair perturbations
    preempted_at: jnp.ndarray  # [A] f64 time of its latest preemption (s; nan before)
    victim_of: jnp.ndarray  # [A] i32 the request that preemption kept in its place (the last
    #                         kept; -1 none)
    victim_p: jnp.ndarray  # [A] f64 that pair's perturbation


class CascadeEntries(struct.PyTreeNode):
    """A model cascade (engine/cascade.py): each request's small-answer check and tier."""

    fail: jnp.ndarray  # [A] bool its small-model answer fails its check
    tier: jnp.ndarray  # [A] i32 TIER_LARGE / TIER_SMALL / TIER_RETRIED


class Entries(struct.PyTreeNode):
    """An instance's active set: running requests, the visible queue, finished records."""

    req: jnp.ndarray  # [A] i32 request id (index into the workload), -1 when empty
    status: jnp.ndarray  # [A] i32 EMPTY / WAITING / RUNNING / DONE
    arrival: jnp.ndarray  # [A] f64 arrival time (seconds)
    prompt: jnp.ndarray  # [A] i32 prompt tokens
    output: jnp.ndarray  # [A] i32 true output tokens
    predicted: jnp.ndarray  # [A] f64 predicted output tokens
    computed: jnp.ndarray  # [A] i32 tokens whose KV is computed (prompt + output so far)
    generated: jnp.ndarray  # [A] i32 output tokens emitted
    blocks: jnp.ndarray  # [A] i32 KV blocks held
    preempted: jnp.ndarray  # [A] bool waiting after a preemption (head of the queue)
    n_preempt: jnp.ndarray  # [A] i32 times preempted
    tokens_computed: jnp.ndarray  # [A] i64 tokens computed, recomputation included (each pass
    # can be max_model_len tokens: int64, so that many preemptions cannot wrap it)
    first_token: jnp.ndarray  # [A] f64 time of the first output token (nan before)
    last_emit: jnp.ndarray  # [A] f64 time of the latest output token (nan before)
    finish: jnp.ndarray  # [A] f64 time the request ended (nan before)
    end_state: jnp.ndarray  # [A] i32 end state once DONE
    give_up_at: jnp.ndarray  # [A] f64 time the request is cancelled or expires (inf = never)
    give_up_state: jnp.ndarray  # [A] i32 CANCELLED or EXPIRED: its end state at give_up_at
    spec_alpha: jnp.ndarray  # [A] f64 per-token draft acceptance rate (speculation)
    kv_ratio: jnp.ndarray  # [A] f64 KV compression factor of the request (1 = uncompressed)
    ready_at: jnp.ndarray  # [A] f64 time its KV lands on this decode instance (INFLIGHT)
    qkey: jnp.ndarray  # [A] i32 vLLM's queue positions: running, the order of admission
    #                    (ascending); preempted and waiting, the order of the deque they were
    #                    pushed back to the front of (ascending, below 0); new arrivals 0
    scheduled_at: jnp.ndarray  # [A] f64 time it was first scheduled (admitted; nan before)
    reject_reason: jnp.ndarray  # [A] i32 REJECT_* why it was rejected (-1: not rejected)
    # one sub-state per mechanism, None when the mechanism is off; each is set up on arrival
    # and reset beside its mechanism:
    prefix: PrefixRefs | None = None  # prefix caching (engine/prefix.py)
    relaxed: RelaxTape | None = (
        None  # engine.relax st/soft (engine/relaxed/shift.py, engine/relaxed/pace.py)
    )
    swap: SwapTape | None = (
        None  # engine.relax_order, a relaxed priority order (engine/relaxed/swap.py)
    )
    cascade: CascadeEntries | None = None  # a model cascade (engine/cascade.py)
    # engine.scheduling_policy priority only (engine/priority.py), else None:
    priority: jnp.ndarray | None = None  # [A] i32 the request's fixed priority (lower first)


# What a slot nobody holds has in each field of Entries (value, dtype): the initial state, and
# the fields a hand-built test state leaves out (tests/unit/engine/toy.py).
EMPTY_ENTRY: dict[str, tuple[float, type]] = {
    "req": (-1, jnp.int32),
    "status": (EMPTY, jnp.int32),
    "arrival": (float("nan"), jnp.float64),
    "prompt": (0, jnp.int32),
    "output": (0, jnp.int32),
    "predicted": (0.0, jnp.float64),
    "computed": (0, jnp.int32),
    "generated": (0, jnp.int32),
    "blocks": (0, jnp.int32),
    "preempted": (False, jnp.bool_),
    "n_preempt": (0, jnp.int32),
    "tokens_computed": (0, jnp.int64),
    "first_token": (float("nan"), jnp.float64),
    "last_emit": (float("nan"), jnp.float64),
    "finish": (float("nan"), jnp.float64),
    "end_state": (-1, jnp.int32),
    "give_up_at": (float("inf"), jnp.float64),
    "give_up_state": (-1, jnp.int32),
    "spec_alpha": (0.0, jnp.float64),
    "kv_ratio": (1.0, jnp.float64),
    "ready_at": (-float("inf"), jnp.float64),
    "qkey": (0, jnp.int32),
    "scheduled_at": (float("nan"), jnp.float64),
    "reject_reason": (-1, jnp.int32),
}


def empty_entries(shape: tuple[int, ...], like, **mechanisms) -> Entries:
    """Entries of `shape` ([I, A]) with every slot empty (EMPTY_ENTRY); `like` a traced int
    scalar every array derives from (keeps sharded carries placed); `mechanisms`: the
    sub-states (and `priority`) of the mechanisms that are on, the others stay None."""

    def full(value, dtype):
        return jnp.full(shape, value, dtype) + jnp.zeros_like(like, dtype)

    return Entries(
        **{name: full(value, dtype) for name, (value, dtype) in EMPTY_ENTRY.items()}, **mechanisms
    )


class Outbox(struct.PyTreeNode):
    """Finished-request records since the host last collected them."""

    req: jnp.ndarray  # [R] i32 request id
    end_state: jnp.ndarray  # [R] i32 end state
    first_token: jnp.ndarray  # [R] f64 first-token time (seconds; nan if none)
    finish: jnp.ndarray  # [R] f64 end time (seconds)
    generated: jnp.ndarray  # [R] i32 output tokens delivered
    n_preempt: jnp.ndarray  # [R] i32 preemptions
    tokens_computed: jnp.ndarray  # [R] i64 tokens computed for the request
    kv_ratio: jnp.ndarray  # [R] f64 KV compression factor it ended with (1 = never compressed)
    scheduled_at: jnp.ndarray  # [R] f64 time it was first scheduled (seconds; nan if never)
    reject_reason: jnp.ndarray  # [R] i32 REJECT_* why it was rejected (-1: not rejected)
    count: jnp.ndarray  # [] i32 valid records
    tier: jnp.ndarray | None = None  # [R] i32 cascade tier (model cascade only, else None)
    shift: jnp.ndarray | None = None  # [R] f64 seconds its events moved by (relaxed engines only:
    #                                   engine/relaxed/shift.py), else None
    # relaxed priority order only (engine/relaxed/swap.py), else None: its latest admission and
    # preemption
    admitted_at: jnp.ndarray | None = None  # [R] f64 time of its latest admission (s; nan none)
    swap_req: jnp.ndarray | None = None  # [R, m] i32 requests that admission passed over (-1)
    swap_p: jnp.ndarray | None = None  # [R, m] f64 their pair perturbations
    preempted_at: jnp.ndarray | None = None  # [R] f64 time of its latest preemption (s; nan none)
    victim_of: jnp.ndarray | None = None  # [R] i32 the request that preemption kept (-1 none)
    victim_p: jnp.ndarray | None = None  # [R] f64 that pair's perturbation


class Stats(struct.PyTreeNode):
    """Running totals of one scenario."""

    steps: jnp.ndarray  # [] i32 iterations that computed tokens (idle clock jumps excluded)
    leaped: jnp.ndarray  # [] i32 of those, iterations applied in closed form (engine/leap.py)
    simple: jnp.ndarray  # [] i32 loop bodies whose first iteration took the simple step
    #                      (servetune/engine/simple_step.py)
    busy_s: jnp.ndarray  # [I] f64 seconds spent in iterations
    kv_peak_blocks: jnp.ndarray  # [I] i32 most KV blocks in use at once
    invariants: jnp.ndarray  # [] i32 error code: a bit per invariant breached (core/errors.py:
    #                          KV over capacity, a clock going back, a stall); 0 on a sound run
    preemptions: jnp.ndarray  # [] i32 preemption events
    prefill_tokens: jnp.ndarray  # [] i64 prompt (and recomputed) tokens processed
    decode_tokens: jnp.ndarray  # [] i64 decode tokens processed
    window_overflow: jnp.ndarray  # [] i32 most arrived requests waiting outside the queue window
    max_running: jnp.ndarray  # [I] i32 most requests running at once
    occupancy_s: jnp.ndarray  # [] f64 integral over time of requests in the system (arrived,
    #                            not ended), request-seconds: mean concurrency x time
    ended: jnp.ndarray  # [] i32 requests that ended (completed or rejected) so far
    slot_bound: jnp.ndarray  # [] i32 iterations where engine.max_slots, not the policy, held
    #                          back an admission (results then depend on the capacity)
    itl_hist: jnp.ndarray  # [H] f64 counts of inter-token gaps per log-spaced bin
    #                        (gaps between output-bearing events: the delivery cadence)
    spec_passes: jnp.ndarray  # [] i64 decode passes (one request, one iteration) with drafts
    spec_proposed: jnp.ndarray  # [] i64 draft tokens proposed
    spec_accepted: jnp.ndarray  # [] i64 draft tokens accepted (before output-length caps)
    spec_emitted: jnp.ndarray  # [] i64 tokens emitted by those passes
    work: jnp.ndarray  # [I, 4] f64 each instance's model work (WORK_COLUMNS): iterations, tokens
    #                    computed, context tokens read, attention work (new tokens x context)


def zero_stats(n_instances: int, bins: int, like) -> Stats:
    """Stats of a scenario that has not started: every total 0 ([I] per instance, [bins] in the
    inter-token histogram); `like` a traced int scalar every array derives from."""
    zi = jnp.zeros_like(like, jnp.int32)
    zl, zf = zi.astype(jnp.int64), zi.astype(jnp.float64)
    per_inst = jnp.zeros((n_instances,), jnp.int32) + zi
    return Stats(
        steps=zi,
        leaped=zi,
        simple=zi,
        busy_s=per_inst + zf,
        kv_peak_blocks=per_inst,
        invariants=zi,
        preemptions=zi,
        prefill_tokens=zl,
        decode_tokens=zl,
        window_overflow=zi,
        max_running=per_inst,
        occupancy_s=zf,
        ended=zi,
        slot_bound=zi,
        itl_hist=jnp.zeros((bins,), jnp.float64) + zf,
        spec_passes=zl,
        spec_proposed=zl,
        spec_accepted=zl,
        spec_emitted=zl,
        work=jnp.zeros((n_instances, len(WORK_COLUMNS)), jnp.float64) + zf,
    )


class SimState(struct.PyTreeNode):
    """The scan carry of one scenario."""

    clock: jnp.ndarray  # [I] f64 each instance's clock (seconds)
    entries: Entries  # fields [I, A]
    next_req: jnp.ndarray  # [] i32 first workload request not yet taken into an active set
    outbox: Outbox
    stats: Stats
    done: jnp.ndarray  # [] bool the scenario has finished (or hit t_stop)
    mid_ended: jnp.ndarray  # [I] i32 requests each instance's latest iteration ended at its
    #                         end (still in the instance for a router looking at earlier times)
    mid_blocks: jnp.ndarray  # [I] i32 KV blocks each instance held during that iteration
    stuck: jnp.ndarray  # [I] bool the instance's latest step computed nothing and left its
    #                     clock where it was (it yields to the others at the same time)
    need: jnp.ndarray  # [] i32 entries per instance the next loop body may need, where that is
    #                    more than a narrow program holds (the host widens it; 0 otherwise;
    #                    servetune/engine/width.py)
    prefix: PrefixCache | None = None  # prefix caching only (engine/prefix.py)
    timeline: Timeline | None = None  # engine.timeline_samples > 0 only
    offered: jnp.ndarray | None = None  # [I] f64 async scheduling only: arrivals by this time
    #                                     (seconds) are offered at the instance's next iteration
    fleet: Fleet | None = None  # engine.autoscale only (engine/autoscale.py)


class Fleet(struct.PyTreeNode):
    """The autoscaler's state (engine/autoscale.py). A replica is OFF, SERVING (cold until
    ready_at) or DRAINING (no new requests; off once its last request ends)."""

    phase: jnp.ndarray  # [I] i32 REPLICA_OFF / REPLICA_SERVING / REPLICA_DRAINING
    ready_at: jnp.ndarray  # [I] f64 time the replica serves from (seconds; its cold start's end)
    spot: jnp.ndarray  # [I] bool the replica is spot (engine/spot.py; all False without spot)
    next_eval: jnp.ndarray  # [] f64 time of the next evaluation (seconds)
    rec: jnp.ndarray  # [Hr] f64 past recommendations (replicas; nan: none yet), a ring of
    #                   engine.autoscale_history
    rec_t: jnp.ndarray  # [Hr] f64 their times (seconds; -inf: none yet)
    n_evals: jnp.ndarray  # [] i32 evaluations so far
    desired: jnp.ndarray  # [] f64 replicas the latest evaluation asked for
    log: jnp.ndarray  # [L, 6] f64 FLEET_LOG_COLUMNS: at time 0, at each evaluation that
    #                   changed them, where a cold start ends and where a replica went off
    n_log: jnp.ndarray  # [] i32 rows written (more than L: the log ran out)
    cold_s: jnp.ndarray  # [] f64 replica-seconds spent cold-starting (provisioned, not serving)
    scale_ups: jnp.ndarray  # [] i32 replicas started
    scale_downs: jnp.ndarray  # [] i32 replicas stopped (cold starts cut short included)
    refused: jnp.ndarray  # [] i32 starts asked for that found no replica off (the rest drain)
    requeued: jnp.ndarray  # [] i32 requests re-queued from a replica that left (requeue, spot)
    preemptions: jnp.ndarray  # [] i32 spot replicas preempted (each restarted cold)
    t_last: jnp.ndarray  # [] f64 the latest end of a step (seconds): where the run ends (the
    #                      clocks of replicas still cold, or off, say nothing of it)


class PrefixCache(struct.PyTreeNode):
    """The prefix-cache table of each instance (engine/prefix.py) and its running totals.
    C = engine.prefix_cache_entries slots, set-associative."""

    ids: jnp.ndarray  # [I, C] i32 prefix block id held by each slot, -1 when empty
    ref: jnp.ndarray  # [I, C] i32 running requests referencing it (0: cached, evictable)
    last: jnp.ndarray  # [I, C] f64 time it was last released (LRU key, seconds)
    depth: jnp.ndarray  # [I, C] i32 block position in its prompt (deeper evicted first on ties)
    lookups: jnp.ndarray  # [2, 3] i64 vLLM 0.32's PrefixCacheStats, recorded at admission:
    #                       rows new requests / requests re-admitted after a preemption;
    #                       columns requests, queries (tokens: prompt + generated so far),
    #                       hits (tokens found cached)
    evictions: jnp.ndarray  # [] i32 blocks evicted (KV pressure or table conflicts)
    insert_failed: jnp.ndarray  # [] i32 blocks not cached: their table set was all referenced
    insert_deferred: jnp.ndarray  # [] i32 iterations with more blocks to insert than one
    #                                iteration inserts (inserted in the next iterations)
