"""Golden fixtures from vLLM's own V1 scheduler, and servetune's replay of them.

A fixture is one case: a slice of a bundled real trace, engine settings under vLLM's own names,
a linear step cost (seconds), and what vLLM's `Scheduler` did with it (servetune.validate.oracle),
iteration by iteration (start, duration, tokens per request, preempted requests) and per request
(first token, finish, end state, output tokens, preemptions). `servetune golden` writes them
(needs the optional extra servetune[vllm]); the default test suite replays every committed
fixture through servetune's engine and compares, without vLLM.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import jax
import numpy as np

from servetune.config import hardware
from servetune.config.policy import make_policy
from servetune.config.scenario import stack_workloads
from servetune.core.errors import ServetuneError
from servetune.core.files import write_whole
from servetune.core.types import END_STATE_NAMES, EngineConfig, Params
from servetune.engine import width
from servetune.engine.loop import step_trace
from servetune.engine.prefix import WAYS
from servetune.run.driver import rollout
from servetune.validate import oracle
from servetune.validate.oracle import PREFIX_STAT_KEYS
from servetune.workload import traces as workload
from servetune.workload.traces import RaggedIds, RequestTrace

FORMAT = 1
VLLM_VERSION = "0.32.0"  # the version the committed fixtures, and servetune's semantics, match
# the vLLM releases whose rules servetune simulates (engine.vllm_version), by fixture version
SIMULATED = {"0.32.0": "0.32", "0.33.0": "0.33"}
FIXTURE_DIR = Path(__file__).resolve().parents[3] / "tests" / "golden" / "fixtures"
# fixtures of the other simulated releases, for the cases whose rules changed
VERSION_DIRS = {"0.33.0": FIXTURE_DIR / "vllm-0.33"}


class GoldenError(ServetuneError):
    """A fixture that cannot be read or replayed, or a case the oracle cannot express."""


# vLLM settings of every case unless a case says otherwise (vLLM's names; num_gpu_blocks are
# the usable blocks, vLLM adds its null block)
ENGINE_DEFAULTS: dict = {
    "block_size": 16,
    "num_gpu_blocks": 20_000,
    "max_model_len": 8192,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 2048,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "long_prefill_token_threshold_adaptive": False,
    "watermark": 0.0,
    "scheduler_reserve_full_isl": True,
    "policy": "fcfs",
    "enable_prefix_caching": False,
    "max_num_active_seqs": None,
    "max_num_queued_reqs": None,
    "max_num_queued_tokens": None,
}
# a linear step cost of the order of an 8B model on one GPU (seconds)
COST = {
    "base_s": 0.005,
    "per_prefill_token_s": 5e-5,
    "per_decode_seq_s": 1e-4,
    "per_ctx_token_s": 1e-7,
}

_CONV = {
    "file": "azure_llm_2023_conv.csv",
    "start_s": 0.0,
    "duration_s": 60.0,
    "rate_scale": 1.0,
    "max_requests": 300,
}
_CONV_4X = {**_CONV, "rate_scale": 4.0, "max_requests": 200}
_CODE = {
    "file": "azure_llm_2023_code.csv",
    "start_s": 0.0,
    "duration_s": 300.0,
    "rate_scale": 1.0,
    "max_requests": 200,
}
_TIGHT = {"num_gpu_blocks": 600}  # 9,600 tokens of KV: a few long requests fill it
_MOONCAKE_CONV = {
    "file": "mooncake_conversation_600s.jsonl",
    "start_s": 0.0,
    "duration_s": 120.0,
    "rate_scale": 1.0,
    "max_requests": 250,
}
_MOONCAKE = {
    "file": "mooncake_synthetic_300s.jsonl",
    "start_s": 0.0,
    "duration_s": 60.0,
    "rate_scale": 1.0,
    "max_requests": 250,
}

CASES: dict[str, dict] = {
    "roomy_kv": {
        "description": "Azure conv, 1x: nothing binds but the token budget",
        "trace": _CONV,
        "engine": {},
    },
    "tight_kv": {
        "description": "Azure conv, 4x, 600 blocks: preemptions; whole-prompt "
        "admission (scheduler_reserve_full_isl, vLLM 0.32's default)",
        "trace": _CONV_4X,
        "engine": _TIGHT,
    },
    "tight_kv_first_chunk": {
        "description": "tight_kv with the older rule: only the first chunk's blocks must fit",
        "trace": _CONV_4X,
        "engine": {**_TIGHT, "scheduler_reserve_full_isl": False},
    },
    "tight_kv_watermark": {
        "description": "tight_kv with watermark 0.1 (60 blocks kept free "
        "by admissions while requests run)",
        "trace": _CONV_4X,
        "engine": {**_TIGHT, "watermark": 0.1},
    },
    "max_num_seqs": {
        "description": "Azure conv, 4x: max_num_seqs 8 binds",
        "trace": _CONV_4X,
        "engine": {"max_num_seqs": 8},
    },
    "max_num_active_seqs": {
        "description": "Azure conv, 4x: max_num_active_seqs 6 below max_num_seqs 32",
        "trace": _CONV_4X,
        "engine": {"max_num_seqs": 32, "max_num_active_seqs": 6},
    },
    "small_budget": {
        "description": "Azure conv, 4x: max_num_batched_tokens 256 (long prompts "
        "prefill over many iterations)",
        "trace": _CONV_4X,
        "engine": {"max_num_batched_tokens": 256},
    },
    "long_prefill": {
        "description": "Azure code: long_prefill_token_threshold 512",
        "trace": _CODE,
        "engine": {"long_prefill_token_threshold": 512},
    },
    "long_prefill_adaptive": {
        "description": "Azure code: threshold 128, adaptive (floored at budget // requests)",
        "trace": _CODE,
        "engine": {
            "long_prefill_token_threshold": 128,
            "long_prefill_token_threshold_adaptive": True,
        },
    },
    "no_chunking": {
        "description": "Azure code: chunked prefill off (budget 8192 = max_model_len)",
        "trace": _CODE,
        "engine": {"enable_chunked_prefill": False, "max_num_batched_tokens": 8192},
    },
    "max_model_len": {
        "description": "Azure code, max_model_len 2048: longer prompts rejected, "
        "sequences stopped at the length cap",
        "trace": _CODE,
        "engine": {"max_model_len": 2048},
    },
    "priority": {
        "description": "Azure conv, 4x, 600 blocks, policy priority: a gateway's "
        "fixed priorities by prompt length (0 below 512 tokens, 1 below "
        "2048, else 2); the priority heap and the victim by priority",
        "trace": {**_CONV_4X, "priority_tiers": [512, 2048]},
        "engine": {**_TIGHT, "policy": "priority"},
    },
    "priority_self_preemption": {
        "description": "priority with 300 blocks: a running request picks itself as the "
        "victim before others are scheduled; vLLM 0.32 ends the scan there, 0.33 goes on "
        "(fixtures of both, engine.vllm_version)",
        "trace": {**_CONV_4X, "priority_tiers": [512, 2048]},
        "engine": {"num_gpu_blocks": 300, "policy": "priority"},
    },
    "queued_caps": {
        "description": "Azure conv, 4x, 8 sequences: the API server's 503 caps, "
        "max_num_queued_reqs 24 and max_num_queued_tokens 16000",
        "trace": _CONV_4X,
        "engine": {"max_num_seqs": 8, "max_num_queued_reqs": 24, "max_num_queued_tokens": 16_000},
    },
    "prefix_cache": {
        "description": "Mooncake synthetic, 1 minute, prefix caching on with the "
        "trace's hash_ids as block hashes (KV blocks of 512 tokens, "
        "the trace's hash block), budget 8192; overloaded, so "
        "queued requests find what earlier ones computed",
        "trace": _MOONCAKE,
        "engine": {
            "block_size": 512,
            "enable_prefix_caching": True,
            "max_model_len": 32768,
            "num_gpu_blocks": 20_000,
            "max_num_batched_tokens": 8192,
        },
    },
    "prefix_cache_tight_kv": {
        "description": "as prefix_cache, with 200 KV blocks and a budget "
        "of 2048: cached blocks are evicted (LRU), and "
        "preempted requests re-admit onto their own "
        "cached prompt and output blocks",
        "trace": _MOONCAKE,
        "engine": {
            "block_size": 512,
            "enable_prefix_caching": True,
            "max_model_len": 32768,
            "num_gpu_blocks": 200,
            "max_num_batched_tokens": 2048,
        },
    },
    "prefix_cache_conversation": {
        "description": "Mooncake conversation, its first 250 requests, prefix caching on (KV "
        "blocks of 512 tokens), 2,000 blocks and a budget of 4096: outputs of about 350 "
        "tokens often fill a block, which vLLM keeps cached when the request ends, so "
        "the order in which old prompt blocks are evicted depends on them",
        "trace": _MOONCAKE_CONV,
        "engine": {
            "block_size": 512,
            "enable_prefix_caching": True,
            "max_model_len": 131072,
            "num_gpu_blocks": 2_000,
            "max_num_batched_tokens": 4096,
        },
    },
}
# async scheduling (vLLM's AsyncScheduler, planning step k+1 while step k runs) where it moves
# the schedule: arrivals wait a step more, and requests finishing in step k still hold their
# KV blocks and running places while step k+1 is planned
_ASYNC = {"async_scheduling": True}
CASES.update(
    {
        "async_roomy_kv": {
            "description": "roomy_kv under async scheduling: each arrival planned a step later",
            "trace": _CONV,
            "engine": _ASYNC,
        },
        "async_tight_kv": {
            "description": "tight_kv under async scheduling: finishing requests hold their "
            "blocks through the next plan, so admissions wait and preemptions differ",
            "trace": _CONV_4X,
            "engine": {**_TIGHT, **_ASYNC},
        },
        "async_max_num_seqs": {
            "description": "max_num_seqs under async scheduling: a finishing request keeps its "
            "place among the 8 through the next plan",
            "trace": _CONV_4X,
            "engine": {"max_num_seqs": 8, **_ASYNC},
        },
        "async_queued_caps": {
            "description": "queued_caps under async scheduling: the API server counts a request "
            "unfinished, and its prompt queued, until the step's output is processed",
            "trace": _CONV_4X,
            "engine": {
                "max_num_seqs": 8,
                "max_num_queued_reqs": 24,
                "max_num_queued_tokens": 16_000,
                **_ASYNC,
            },
        },
        "async_prefix_cache_tight_kv": {
            "description": "prefix_cache_tight_kv under async scheduling: finished requests' "
            "blocks return to the free queue a step later, which moves evictions",
            "trace": _MOONCAKE,
            "engine": {**CASES["prefix_cache_tight_kv"]["engine"], **_ASYNC},
        },
    }
)


def case_requests(case: dict) -> dict:
    """The case's requests as lists in trace order: arrival (s), prompt and output (tokens),
    from a slice of a bundled trace; with `priority_tiers` [t1, t2, ...] also a priority, the
    number of tiers a request's prompt reaches (a gateway's fixed priorities, lower first)."""

    spec = case["trace"]
    trace = workload.load_trace(workload.bundled_path(spec["file"]))
    trace = workload.slice_trace(
        trace,
        start_s=spec["start_s"],
        duration_s=spec["duration_s"],
        rate_scale=spec["rate_scale"],
        max_requests=spec["max_requests"],
    )
    columns = {
        "arrival": [float(a) for a in trace.arrival],
        "prompt": [int(p) for p in trace.prompt],
        "output": [int(o) for o in trace.output],
    }
    if "priority_tiers" in spec:
        tiers = np.asarray(spec["priority_tiers"])
        columns["priority"] = [int(np.sum(p >= tiers)) for p in trace.prompt]
    if trace.hash_ids is not None:  # the trace's prefix block ids, as vLLM's block hashes
        columns["block_hashes"] = [[int(h) for h in row] for row in trace.hash_ids]
    return columns


def make_fixture(name: str) -> dict:
    """Run case `name` through vLLM's scheduler (servetune.validate.oracle) and return the
    fixture: the case, its requests, and vLLM's steps and per-request results."""

    if name not in CASES:
        raise GoldenError(f"golden case {name!r}: unknown; expected one of {sorted(CASES)}")
    case = CASES[name]
    engine = {**ENGINE_DEFAULTS, **case["engine"]}
    requests = case_requests(case)
    try:
        out = oracle.simulate_vllm(requests, engine, COST)
    except ValueError as err:  # a setting the oracle cannot express
        raise GoldenError(f"golden case {name!r}: {err}") from None
    return {
        "format": FORMAT,
        "vllm_version": out["vllm_version"],
        "case": name,
        "description": case["description"],
        "trace": case["trace"],
        "engine": engine,
        "cost": COST,
        "requests": requests,
        "steps": out["steps"],
        "results": out["requests"],
        "prefix_cache": out.get("prefix_cache"),
    }


def write_fixture(fixture: dict, path: Path) -> None:
    """Write `fixture` as gzipped JSON at `path`, whole or not at all (temporary file, fsync,
    rename)."""
    data = gzip.compress(
        json.dumps(fixture, separators=(",", ":"), allow_nan=False).encode(), mtime=0
    )
    write_whole(path, lambda tmp: tmp.write_bytes(data))


def load_fixture(path: Path) -> dict:
    """Read a fixture written by `write_fixture`; a damaged file or another format is a
    GoldenError naming the file. A fixture of another vLLM version loads (`version_note` says
    what its comparison means)."""
    path = Path(path)
    try:
        fixture = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, ValueError) as err:
        raise GoldenError(f"{path}: not a golden fixture (gzipped JSON): {err}") from None
    if not isinstance(fixture, dict) or fixture.get("format") != FORMAT:
        got = fixture.get("format") if isinstance(fixture, dict) else type(fixture).__name__
        raise GoldenError(f"{path}: fixture format {got!r}; expected {FORMAT}")
    _check_sections(path, fixture)
    _check_case(path, fixture)
    return fixture


def case_name(path: Path) -> str:
    """The case a fixture file is named for: its name without .json.gz."""
    return Path(path).name.removesuffix(".json.gz")


def _check_case(path: Path, fixture: dict) -> None:
    """GoldenError where the fixture is not the case its file is named for: its "case", or
    (for a case of CASES) its trace slice or engine settings, differ from the name's, so a
    replay that comes out "identical" proves that case."""
    name = case_name(path)
    if fixture["case"] != name:
        raise GoldenError(
            f"{path}: holds case {fixture['case']!r}; expected case {name!r}, as its file is "
            f"named (rename the file, or rewrite it with `servetune golden --cases {name}`)"
        )
    if name not in CASES:
        return
    expected = {
        "trace": CASES[name]["trace"],
        "engine": {**ENGINE_DEFAULTS, **CASES[name]["engine"]},
    }
    for section, want in expected.items():
        got = fixture[section]
        if got != want:
            keys = sorted(
                k
                for k in set(got) | set(want)
                if k not in got or k not in want or got[k] != want[k]
            )
            raise GoldenError(
                f"{path}: section {section!r} is not case {name!r}'s ({', '.join(keys[:4])} "
                f"differ: {keys[0]} = {got.get(keys[0])!r}, expected {want.get(keys[0])!r}); "
                f"rewrite it with `servetune golden --cases {name}`"
            )


def version_note(fixture: dict) -> str | None:
    """None for a fixture of a vLLM version whose rules servetune simulates (`SIMULATED`);
    otherwise a note that a difference from it may be that version's, not servetune's."""
    version = fixture.get("vllm_version")
    if version in SIMULATED:
        return None
    return (
        f"written by vLLM {version}; servetune's scheduler matches vLLM "
        f"{', '.join(SIMULATED)}, so a difference may be that version's rule (rewrite the "
        f"fixture under {VLLM_VERSION} with `servetune golden` to test servetune)"
    )


def drift(fixture: dict) -> tuple[str, list[str]]:
    """(installed vLLM version, differences) between the installed vLLM's scheduler and the one
    that wrote `fixture`, on the fixture's own requests, settings and step cost: `compare`'s
    list, empty where the installed version schedules the case identically. Needs the
    servetune[vllm] extra."""
    try:
        out = oracle.simulate_vllm(fixture["requests"], fixture["engine"], fixture["cost"])
    except ValueError as err:  # a setting this vLLM cannot express
        raise GoldenError(f"golden case {fixture['case']!r}: {err}") from None
    got = {"steps": out["steps"], "requests": out["requests"]}
    if fixture.get("prefix_cache") is not None:
        got["prefix_cache"] = out["prefix_cache"]
    return out["vllm_version"], compare(fixture, got)


# what a fixture's replay and comparison read: section -> (type, the keys it must hold)
SECTIONS = {
    "case": (str, ()),
    "engine": (
        dict,
        (
            "block_size",
            "num_gpu_blocks",
            "max_model_len",
            "max_num_seqs",
            "max_num_batched_tokens",
            "enable_chunked_prefill",
        ),
    ),
    "cost": (dict, ("base_s", "per_prefill_token_s", "per_decode_seq_s", "per_ctx_token_s")),
    "requests": (dict, ("arrival", "prompt", "output")),
    "steps": (list, ()),
    "results": (dict, ("first_token", "finish", "end_state", "generated", "n_preempt")),
    "vllm_version": (str, ()),  # the release that wrote it (version_note)
}


def _check_sections(path: Path, fixture: dict) -> None:
    """GoldenError naming the file and the first section (or key of one) that is missing or
    of another type, so a damaged fixture never reaches the replay as a KeyError."""
    for section, (kind, keys) in SECTIONS.items():
        if section not in fixture:
            raise GoldenError(
                f"{path}: no {section!r} section; a fixture holds "
                f"{', '.join(SECTIONS)} (rewrite it with `servetune golden`)"
            )
        value = fixture[section]
        if not isinstance(value, kind):
            raise GoldenError(
                f"{path}: section {section!r} is a {type(value).__name__}; "
                f"expected a {kind.__name__}"
            )
        missing = [k for k in keys if k not in value]
        if missing:
            raise GoldenError(f"{path}: section {section!r} lacks {', '.join(missing)}")
    _check_rows(path, fixture)


STEP_KEYS = ("t", "dur", "tokens", "preempted")  # what compare reads of each iteration


def _check_rows(path: Path, fixture: dict) -> None:
    """GoldenError naming the first iteration that is not a record of STEP_KEYS, or the first
    per-request list that does not hold one entry per request."""
    for k, step in enumerate(fixture["steps"]):
        if not isinstance(step, dict) or any(key not in step for key in STEP_KEYS):
            raise GoldenError(
                f"{path}: steps[{k}] = {str(step)[:60]}; expected a record of "
                f"{', '.join(STEP_KEYS)}"
            )
    arrival = fixture["requests"]["arrival"]
    if not isinstance(arrival, list):
        raise GoldenError(
            f"{path}: requests.arrival is a {type(arrival).__name__}; expected a list, one "
            f"arrival time (s) per request"
        )
    n = len(arrival)
    for section, keys in (
        ("requests", SECTIONS["requests"][1]),
        ("results", SECTIONS["results"][1]),
    ):
        for key in keys:
            got = fixture[section][key]
            if not isinstance(got, list) or len(got) != n:
                size = len(got) if isinstance(got, list) else type(got).__name__
                raise GoldenError(
                    f"{path}: {section}.{key} holds {size} entries; expected one per request ({n})"
                )


def fixture_paths(directory: Path = FIXTURE_DIR) -> list[Path]:
    """The committed fixtures, by case name."""
    return sorted(Path(directory).glob("*.json.gz"))


_SLOTS, _WINDOW = 256, 256  # replay capacities: every case's running and waiting requests


def _servetune_inputs(fixture: dict):
    """(trace, params, engine config) of servetune's engine for a fixture's case."""

    eng, req = fixture["engine"], fixture["requests"]
    hash_tokens = eng.get("hash_block_tokens", eng["block_size"])
    if eng["policy"] not in ("fcfs", "priority") or (
        eng["enable_prefix_caching"] and hash_tokens != eng["block_size"]
    ):
        raise GoldenError(
            f"golden case {fixture['case']!r}: servetune replays fcfs and "
            f"priority, with prefix caching only where vLLM's KV block is the "
            f"trace's hash block; policy={eng['policy']}, block_size="
            f"{eng['block_size']}, hash_block_tokens={hash_tokens}"
        )
    unlimited = lambda v: math.inf if v is None else float(v)
    policy = make_policy(
        {
            "max_num_seqs": eng["max_num_seqs"],
            "max_num_batched_tokens": eng["max_num_batched_tokens"],
            "watermark": eng["watermark"],
            "long_prefill_token_threshold": eng["long_prefill_token_threshold"],
            "max_num_active_seqs": unlimited(eng["max_num_active_seqs"]),
            "max_num_queued_reqs": unlimited(eng["max_num_queued_reqs"]),
            "max_num_queued_tokens": unlimited(eng["max_num_queued_tokens"]),
        },
        order=eng["policy"],
    )
    cost = hardware.linear_cost_params(kv_blocks=eng["num_gpu_blocks"], **fixture["cost"])
    n = len(req["arrival"])
    if eng["max_num_seqs"] > _SLOTS or n > _WINDOW:
        raise GoldenError(
            f"golden case {fixture['case']!r}: replays hold at most {_SLOTS} "
            f"running and {_WINDOW} waiting requests; got max_num_seqs "
            f"{eng['max_num_seqs']} and {n} requests"
        )
    prefix, hash_ids = {}, None
    if eng["enable_prefix_caching"]:  # a table so roomy that no set ever overflows
        rows = req.get("block_hashes") or [[]] * n
        hash_ids = RaggedIds.from_rows(rows)
        slots = 1 << max(10, (4 * sum(map(len, rows))).bit_length())
        prefix = {
            "prefix_cache": True,
            "prefix_block_tokens": hash_tokens,
            "prefix_cache_entries": max(slots, WAYS),
        }
    # one shape for every case, so cases that differ only in policy numbers share compilations
    cfg = EngineConfig(
        max_slots=_SLOTS,
        queue_window=_WINDOW,
        block_size=eng["block_size"],
        max_model_len=eng["max_model_len"],
        chunked_prefill=eng["enable_chunked_prefill"],
        cost_form="linear",
        outbox=512,
        scheduler_reserve_full_isl=eng["scheduler_reserve_full_isl"],
        long_prefill_token_threshold_adaptive=eng["long_prefill_token_threshold_adaptive"],
        scheduling_policy=eng["policy"],
        async_scheduling=bool(eng.get("async_scheduling", False)),
        vllm_version=SIMULATED.get(fixture.get("vllm_version"), "0.32"),
        **prefix,
    )
    trace = RequestTrace(
        fixture["case"],
        np.asarray(req["arrival"], np.float64),
        np.asarray(req["prompt"], np.int32),
        np.asarray(req["output"], np.int32),
        priority=(np.asarray(req["priority"], np.int32) if "priority" in req else None),
        hash_ids=hash_ids,
    )
    return trace, Params(policy=policy, cost=cost), cfg


def replay(fixture: dict, start_width: int | None = None) -> dict:
    """servetune's engine on a fixture's case: its iterations (one per step, the leap
    off) and its per-request results (the production rollout, the leap on, from
    `start_width` entries per instance: None, the full width), in the oracle's shapes."""

    trace, params, cfg = _servetune_inputs(fixture)
    wl = stack_workloads([trace], [trace.output.astype(np.float64)], drain_s=1e6, engine=cfg)
    n_steps = len(fixture["steps"]) + len(trace) + 1  # idle jumps take a step each
    n_steps = 1 << (n_steps - 1).bit_length()  # fewer distinct compilations
    _, info = step_trace(jax.tree.map(lambda x: x[0], wl), params, cfg, n_steps)
    info = jax.device_get(info)
    steps = []
    for k in range(n_steps):
        tokens = [
            [int(r), int(n)]
            for r, n in zip(info["req"][k], info["tokens"][k], strict=True)
            if n > 0
        ]
        preempted = sorted(int(r) for r in info["preempted"][k] if r >= 0)
        if tokens or preempted:
            steps.append(
                {
                    "t": float(info["t"][k]),
                    "dur": float(info["dur"][k]),
                    "tokens": tokens,
                    "preempted": preempted,
                }
            )
    batched = jax.tree.map(lambda x: jax.numpy.asarray(x)[None], params)
    res = rollout(wl, batched, width.start(cfg, start_width), [len(trace)])[0][0]
    nan_none = lambda a: [None if math.isnan(v) else float(v) for v in a]
    out = {
        "steps": steps,
        "requests": {
            "first_token": nan_none(res.first_token),
            "finish": nan_none(res.finish),
            "end_state": [END_STATE_NAMES[s] for s in res.end_state],
            "generated": [int(g) for g in res.generated],
            "n_preempt": [int(p) for p in res.n_preempt],
        },
    }
    if cfg.prefix_cache:  # rows new / re-admitted requests, columns as PREFIX_STAT_KEYS
        counts = np.asarray(res.stats["prefix_lookups"]).reshape(-1).tolist()
        out["prefix_cache"] = dict(zip(PREFIX_STAT_KEYS, map(int, counts), strict=True))
    return out


def _close(a, b, rel: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def compare(expected: dict, got: dict, rel: float = 1e-9, limit: int = 5) -> list[str]:
    """Differences between vLLM's run (`expected`: a fixture) and servetune's (`got`: `replay`):
    the iterations (start and duration to `rel`, tokens per request, preempted requests) up to
    the first that differs, then every request (first token and finish to `rel`, end state,
    output tokens, preemptions). At most `limit` of each kind, empty when identical."""
    out = []
    # up to the shorter run: a run cut short (or longer) is said below, after them
    for k, (e, g) in enumerate(zip(expected["steps"], got["steps"], strict=False)):
        same = (
            _close(e["t"], g["t"], rel)
            and _close(e["dur"], g["dur"], rel)
            and dict(map(tuple, e["tokens"])) == dict(map(tuple, g["tokens"]))
            and sorted(e["preempted"]) == g["preempted"]
        )
        if not same:
            out.append(f"iteration {k}: vLLM {_show_step(e)}; servetune {_show_step(g)}")
            break
    if not out and len(expected["steps"]) != len(got["steps"]):
        out.append(f"iterations: vLLM ran {len(expected['steps'])}, servetune {len(got['steps'])}")
    er, gr = expected["results"], got["requests"]
    bad = 0
    for i in range(len(er["finish"])):
        fields = {
            f: (er[f][i], gr[f][i])
            for f in ("first_token", "finish", "end_state", "generated", "n_preempt")
        }
        if not (
            all(_close(*fields[f], rel) for f in ("first_token", "finish"))
            and all(a == b for f, (a, b) in fields.items() if f not in ("first_token", "finish"))
        ):
            bad += 1
            if bad <= limit:
                out.append(
                    f"request {i}: " + ", ".join(f"{f} {a} vs {b}" for f, (a, b) in fields.items())
                )
    if bad > limit:
        out.append(f"... {bad} requests differ in all")
    if "prefix_cache" in got and expected.get("prefix_cache") != got["prefix_cache"]:
        out.append(
            f"prefix cache stats: vLLM {expected.get('prefix_cache')}; servetune "
            f"{got['prefix_cache']}"
        )
    return out


def _show_step(step: dict) -> str:
    tokens = dict(map(tuple, step["tokens"]))
    return (
        f"t={step['t']:.9g} dur={step['dur']:.9g} tokens={dict(sorted(tokens.items()))} "
        f"preempted={sorted(step['preempted'])}"
    )
