"""The real engine for the benchmarks that check servetune against vLLM (bench_sim2real.py,
bench_validate.py): `servetune observe` run in a subprocess of an interpreter that has the
servetune[vllm] extra, so the benchmarks themselves need only servetune."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path

import pandas as pd

from servetune.validate.calibrate import linear_seconds
from servetune.validate.observe import EngineSettings

ENGINE_ENV = {"OMP_NUM_THREADS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def check_vllm(python: str) -> None:
    """SystemExit with what to install when `python` cannot import vLLM."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        ok = subprocess.run([python, "-c", probe], capture_output=True, check=False).returncode == 0
    except OSError as err:
        raise SystemExit(f"error: --vllm-python {python}: {err}") from None
    if not ok:
        raise SystemExit(
            f"error: --vllm-python {python} cannot import vllm; this benchmark runs the real "
            f"engine through `servetune observe`, which needs the servetune[vllm] extra: in a "
            f"separate virtual environment, pip install -e '.[vllm]' && pip uninstall -y "
            f"torchvision torchaudio torchcodec triton, then pass its python as --vllm-python"
        )


def observe(
    args, name: str, start_s: float, engine: EngineSettings, rate_scale: float | None = None
) -> tuple[Path, float]:
    """Observe the slice [start_s, start_s + args.duration_s) of args.trace on the real engine
    (args.vllm_python) with `engine`, at `rate_scale` (default args.rate_scale), into
    args.out/name (kept and reused with args.reuse when it holds the same run); returns
    (folder, wall seconds; 0 when reused)."""
    rate_scale = args.rate_scale if rate_scale is None else rate_scale
    folder = args.out / name
    wanted = {
        "start_s": start_s,
        "duration_s": args.duration_s,
        "rate_scale": rate_scale,
        "engine": dataclasses.asdict(engine),
    }
    meta_path = folder / "observe.json"
    if args.reuse and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        same_trace = Path(str(meta.get("trace"))).name == Path(args.trace).name
        if same_trace and all(meta.get(k) == v for k, v in wanted.items()):
            print(f"  {name}: reusing {folder}", flush=True)
            return folder, 0.0
    flags = []
    for key, value in dataclasses.asdict(engine).items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags += [flag] if value else []
        else:
            flags += [flag, str(value)]
    cmd = [
        args.vllm_python,
        "-m",
        "servetune.cli.main",
        "observe",
        "--trace",
        args.trace,
        "--start-s",
        str(start_s),
        "--duration-s",
        str(args.duration_s),
        "--rate-scale",
        str(rate_scale),
        *flags,
        "--out",
        str(folder),
        "--model-dir",
        str(args.out / "model"),
    ]
    print(f"  {name}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **ENGINE_ENV}, check=False
    )
    wall = time.perf_counter() - t0
    (args.out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(
            f"error: observe {name} failed (exit {proc.returncode}); its log is "
            f"{args.out / f'{name}.log'}:\n{proc.stderr[-3000:]}"
        )
    print(f"    {proc.stdout.strip().splitlines()[-1]} ({wall:.0f} s wall)", flush=True)
    return folder, wall


def step_time_ratio(steps: pd.DataFrame, cost: dict) -> float:
    """An observed run's measured engine time over what the linear `cost` predicts for the
    same steps (observe's steps.csv columns): 1.0 when the engine ran as fast as the model
    says; the machine's speed drifts between runs, even on the virtual clock."""
    return float(steps["seconds"].sum() / linear_seconds(cost, steps).sum())
