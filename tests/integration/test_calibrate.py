"""`servetune calibrate`: recovery of known cost coefficients, noise, bad CSVs, the command."""

import json
import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from servetune.config import hardware as hw
from servetune.core import cost as cost_model
from servetune.core.errors import CalibrationError, ConfigError, TraceError
from servetune.run import api
from servetune.validate import calibrate as cal

CONF = Path(str(resources.files("servetune.conf")))  # conf/, shipped as servetune.conf
N = 360  # rows of every synthetic table: one compiled fit per form serves every test
ROOFLINE_TRUE = {"flops_efficiency": 0.55, "bandwidth_efficiency": 0.72, "overhead_s": 0.0031}
LINEAR_TRUE = {
    "base_s": 0.0042,
    "per_prefill_token_s": 6.5e-5,
    "per_decode_seq_s": 1.5e-4,
    "per_ctx_token_s": 2.5e-8,
    "per_attn_work_s": 4e-10,
}  # attention: 0.8 ms for a
#                                                                   fresh 2k-token prompt
SETUPS = {  # (gpu, model, tp, weight_bits, kv_bits, allreduce_latency_s)
    "h100-8b": ("h100", "llama3_8b", 1, 16, 16, 0.0),
    "h200-70b-tp2-int8": ("h200", "llama3_70b", 2, 8, 8, 5e-6),
}


def batches(n=N, seed=0, kinds=(0, 1, 2)):
    """Batch compositions: decode-only (bandwidth-bound), prefill-only (compute-bound above a
    few hundred tokens; fresh prompts or chunks continuing a cached one) and mixed batches,
    with log-uniform sizes and per-batch mean contexts so the columns are not collinear.
    attn_work is exact: sum over sequences of new x (context + (new + 1) / 2)."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(n):
        kind = kinds[k % len(kinds)]
        mean_ctx = np.exp(rng.uniform(np.log(64), np.log(8000)))
        d = 0 if kind == 1 else int(np.exp(rng.uniform(0, np.log(256))))
        ctxs = rng.integers(1, 2 * mean_ctx, d)
        p = 0 if kind == 0 else int(np.exp(rng.uniform(np.log(16), np.log(8192))))
        cached = int(rng.choice([0, rng.integers(0, 8000)])) if p else 0
        rows.append((p, d, ctxs.sum() + cached, (ctxs + 1.0).sum() + p * (cached + (p + 1) / 2)))
    return pd.DataFrame(rows, columns=list(cal.FEATURES)).astype(float)


def seconds(table, cost, form):
    """Iteration times of `table` under `cost` from the simulator's own step_time."""
    feats = (jnp.asarray(table[c].to_numpy()) for c in cal.FEATURES)
    return np.asarray(cost_model.step_time(cost, form, *feats))


def roofline_cost(setup, **coef):
    gpu, model, tp, wb, kvb, ar = SETUPS[setup]
    return hw.roofline_cost_params(
        hw.GPUS[gpu],
        hw.MODELS[model],
        tp=tp,
        weight_bits=wb,
        kv_bits=kvb,
        kv_blocks=1,
        allreduce_latency_s=ar,
        **coef,
    )


def fit_roofline(table, setup, **kw):
    gpu, model, tp, wb, kvb, ar = SETUPS[setup]
    return cal.fit_cost_model(
        table, "roofline", gpu, model, tp, weight_bits=wb, kv_bits=kvb, allreduce_latency_s=ar, **kw
    )


def rel_errors(result, true):
    return {k: result.coefficients[k] / v - 1 for k, v in true.items()}


@pytest.fixture(scope="module")
def table():
    return batches()


@pytest.fixture(scope="module")
def linear_cost():
    return hw.linear_cost_params(kv_blocks=1, **LINEAR_TRUE)


# --------------------------------------------------------------------------- recovery


@pytest.mark.parametrize("setup", list(SETUPS))
def test_roofline_recovers_known_coefficients(table, setup):
    cost = roofline_cost(setup, **ROOFLINE_TRUE)
    data = table.assign(seconds=seconds(table, cost, "roofline"))
    # Start away from the truth (the configured defaults), as a user would.
    res = fit_roofline(
        data,
        setup,
        start={"flops_efficiency": 0.6, "bandwidth_efficiency": 0.8, "overhead_s": 0.002},
    )
    # Both regimes are present, so both efficiencies are determined.
    assert 0.2 * N < res.compute_bound_rows < 0.8 * N
    errs = rel_errors(res, ROOFLINE_TRUE)
    assert max(map(abs, errs.values())) < 0.01, errs
    assert res.rms_rel_error < 1e-4 and res.max_rel_error < 1e-3
    assert res.n_rows == N and res.warnings == [] and res.labels["tp"] == SETUPS[setup][2]


@pytest.mark.parametrize("init", ["lstsq", "scale"])
def test_linear_recovers_known_coefficients(table, linear_cost, init):
    data = table.assign(seconds=seconds(table, linear_cost, "linear"))
    res = cal.fit_cost_model(data, "linear", init=init)
    errs = rel_errors(res, LINEAR_TRUE)
    assert max(map(abs, errs.values())) < 0.01, errs
    assert res.rms_rel_error < 1e-4 and res.init.startswith(init)


def test_log_objective_recovers_too(table):
    cost = roofline_cost("h100-8b", **ROOFLINE_TRUE)
    data = table.assign(seconds=seconds(table, cost, "roofline"))
    res = fit_roofline(data, "h100-8b", objective="log")
    assert max(map(abs, rel_errors(res, ROOFLINE_TRUE).values())) < 0.01


@pytest.mark.parametrize("form", ["roofline", "linear"])
def test_noisy_measurements_fit_with_bounded_error(table, linear_cost, form):
    cost = roofline_cost("h100-8b", **ROOFLINE_TRUE) if form == "roofline" else linear_cost
    clean = seconds(table, cost, form)
    noise = 1 + 0.02 * np.random.default_rng(7).standard_normal(N)  # 2% multiplicative
    data = table.assign(seconds=clean * noise)
    res = (
        fit_roofline(data, "h100-8b") if form == "roofline" else cal.fit_cost_model(data, "linear")
    )
    true = ROOFLINE_TRUE if form == "roofline" else LINEAR_TRUE
    # The residual is the noise: RMS ~ 2%, max ~ 3-4 sigma.
    assert 0.015 < res.rms_rel_error < 0.025 and res.max_rel_error < 0.1
    # The fitted model predicts the noiseless times far better than the noise.
    assert np.sqrt(np.mean((res.predicted_s / clean - 1) ** 2)) < 0.005
    for k, err in rel_errors(res, true).items():
        # attention work is a small share of these steps' time: its coefficient is the least
        # determined (the std-error bound below is the sharper check)
        assert abs(err) < (0.15 if k == "per_attn_work_s" else 0.05), (k, err)
        assert abs(err) < 4 * res.std_errors[k] + 1e-3, (k, err, res.std_errors[k])


def test_undetermined_coefficients_are_reported(table, linear_cost):
    # Decode-only batches: no row is compute-bound, so flops_efficiency is only bounded.
    decode = batches(kinds=(0,))
    cost = roofline_cost("h100-8b", **ROOFLINE_TRUE)
    res = fit_roofline(decode.assign(seconds=seconds(decode, cost, "roofline")), "h100-8b")
    assert res.compute_bound_rows == 0 and res.rms_rel_error < 1e-3
    assert any(w.startswith("flops_efficiency: no row is compute-bound") for w in res.warnings)
    assert abs(res.coefficients["bandwidth_efficiency"] / 0.72 - 1) < 0.01
    assert res.std_errors["flops_efficiency"] == np.inf
    assert res.std_errors["bandwidth_efficiency"] < 1e-6
    # No prefill at all: the linear per-prefill coefficient is fixed at 0 and said so.
    res = cal.fit_cost_model(
        decode.assign(seconds=seconds(decode, linear_cost, "linear")), "linear"
    )
    assert res.coefficients["per_prefill_token_s"] == 0.0
    assert any(
        w.startswith("per_prefill_token_s: column 'prefill_tokens' is 0") for w in res.warnings
    )
    # ... and attention work, exactly ctx_tokens + decode_seqs in decode-only batches, too:
    # its cost shows up in those two coefficients
    assert res.coefficients["per_attn_work_s"] == 0.0
    assert any(
        w.startswith("per_attn_work_s: column 'attn_work' is a combination") for w in res.warnings
    )
    attn = LINEAR_TRUE["per_attn_work_s"]
    for key in ("per_decode_seq_s", "per_ctx_token_s"):
        assert abs(res.coefficients[key] / (LINEAR_TRUE[key] + attn) - 1) < 0.01


# --------------------------------------------------------------------------- loading


def write(tmp_path, text, name="m.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_load_measurements_reads_and_approximates_attn_work(tmp_path):
    path = write(
        tmp_path,
        "seconds,decode_seqs,prefill_tokens,ctx_tokens,note\n"
        "0.01,4,0,4000,decode\n\n0.05,2,512,900,mixed\n",
    )
    t = cal.load_measurements(path)
    assert list(t.columns) == list(cal.FEATURES) + ["seconds"]
    assert list(t.index) == [2, 4] and t.attrs["attn_work_approximated"]
    # Exact for decodes plus one fresh prefill chunk: 1 x (ctx + 1) each, 512 x 513 / 2.
    assert t["attn_work"].tolist() == [4000 + 4, 900 + 2 + 512 * 513 / 2]
    exact = cal.load_measurements(
        write(
            tmp_path,
            "prefill_tokens,decode_seqs,ctx_tokens,attn_work,seconds\n8,0,0,36,0.02\n",
            "b.csv",
        )
    )
    assert exact["attn_work"].tolist() == [36.0] and not exact.attrs["attn_work_approximated"]


HEAD = "prefill_tokens,decode_seqs,ctx_tokens,seconds\n"
GOOD = "128,4,4000,0.02\n"


@pytest.mark.parametrize(
    "text, where, fragment",
    [
        ("prefill_tokens,decode_seqs,seconds\n1,1,0.1\n", ":1:", "lacks column(s) ['ctx_tokens']"),
        (
            HEAD + GOOD + "abc,4,4000,0.02\n",
            ":3:",
            "column 'prefill_tokens' = 'abc'; expected a number",
        ),
        (HEAD + GOOD + GOOD + "128,-1,4000,0.02\n", ":4:", "column 'decode_seqs' = '-1'"),
        (HEAD + GOOD + "128,4,nan,0.02\n", ":3:", "column 'ctx_tokens' = 'nan'"),
        (
            HEAD + GOOD + "128,4,4000,inf\n",
            ":3:",
            "column 'seconds' = 'inf'; expected seconds within",
        ),
        (
            HEAD + "128,4,4000,0\n",
            ":2:",
            "column 'seconds' = '0'; expected seconds within [1e-06, 3600]",
        ),
        (HEAD + "128,4,4000,\n", ":2:", "column 'seconds' = ''"),
        (HEAD + "0,0,4000,0.01\n", ":2:", "an empty batch"),
        (HEAD + "128,4\n", ":2:", "2 fields; expected 4"),
        # an extra field: 1,28 read as prefill 1, decode 28, ctx 4, seconds 4000
        (
            HEAD + GOOD + "1,28,4,4000,0.02\n",
            ":3:",
            (
                "5 fields; expected 4 (prefill_tokens, "
                "decode_seqs, ctx_tokens, seconds); an unquoted comma"
            ),
        ),
        (
            "prefill_tokens,decode_seqs,ctx_tokens,attn_work,seconds\n1,1,1,-5,0.1\n",
            ":2:",
            "column 'attn_work' = '-5'",
        ),
        ("", "", "empty file; expected a header line"),
        (HEAD, "", "no data rows"),
    ],
)
def test_bad_csv_names_file_line_and_column(tmp_path, text, where, fragment):
    path = write(tmp_path, text)
    with pytest.raises(TraceError) as info:
        cal.load_measurements(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}{where}") and fragment in msg, msg


def test_missing_file_and_bad_arguments(tmp_path, table):
    with pytest.raises(TraceError, match="file not found"):
        cal.load_measurements(tmp_path / "absent.csv")
    data = table.assign(seconds=0.01)
    with pytest.raises(ConfigError, match="form: got 'cubic'"):
        cal.fit_cost_model(data, "cubic")
    with pytest.raises(ConfigError, match="hardware.gpu: unknown name 'h900'"):
        cal.fit_cost_model(data, "roofline", "h900", "llama3_8b", 1)
    with pytest.raises(ConfigError, match="hardware.tp: got 3"):
        cal.fit_cost_model(data, "roofline", "h100", "llama3_8b", 3)
    with pytest.raises(TraceError, match="2 data row"):
        cal.fit_cost_model(data.head(2), "linear")
    bad = data.copy()
    bad.loc[5, "seconds"] = -1.0
    with pytest.raises(TraceError, match="row 5: column 'seconds' = -1.0"):
        cal.fit_cost_model(bad, "linear")


# --------------------------------------------------------------------------- the command


def run_cli(tmp_path, *overrides):
    """`servetune calibrate ...` in a subprocess (in-process, Hydra's logging setup
    would close streams pytest captured); returns (the run dir, the finished process)."""
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "servetune.cli.main",
        "calibrate",
        f"hydra.run.dir={out}",
        *overrides,
    ]
    env = dict(os.environ, JAX_PLATFORMS="cpu", COLUMNS="200")
    return out, subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env=env, check=False
    )


def test_cli_roofline_writes_a_usable_hardware_config(tmp_path, table):
    setup = "h200-70b-tp2-int8"
    cost = roofline_cost(setup, **ROOFLINE_TRUE)
    path = tmp_path / "measured.csv"
    table.assign(seconds=seconds(table, cost, "roofline")).to_csv(path, index=False)
    out, proc = run_cli(
        tmp_path,
        f"path={path}",
        "hardware=h200",
        "hardware.tp=2",
        "model=llama3_70b",
        "model.weight_bits=8",
        "model.kv_bits=8",
    )
    assert proc.returncode == 0, proc.stderr
    assert "flops_efficiency" in proc.stdout and "RMS relative" in proc.stdout
    doc = OmegaConf.load(out / "calibrated.yaml")
    shipped = OmegaConf.load(CONF / "hardware" / "h200.yaml")
    assert list(doc) == list(shipped) and doc.gpu == "h200" and doc.tp == 2
    for k, v in ROOFLINE_TRUE.items():
        assert doc[k] == pytest.approx(v, rel=1e-5)
    metrics = json.loads((out / "calibration.json").read_text())
    assert metrics["n_rows"] == N and metrics["rms_rel_error"] < 1e-4
    assert metrics["coefficients"]["overhead_s"] == pytest.approx(0.0031, rel=1e-5)
    # Usable as a hardware= group: the fitted rates reach the simulator's cost model.
    rebuilt = hw.roofline_cost_params(
        hw.GPUS[doc.gpu],
        hw.MODELS["llama3_70b"],
        tp=doc.tp,
        weight_bits=8,
        kv_bits=8,
        kv_blocks=1,
        flops_efficiency=doc.flops_efficiency,
        bandwidth_efficiency=doc.bandwidth_efficiency,
        overhead_s=doc.overhead_s,
        allreduce_latency_s=doc.allreduce_latency_s,
    )
    np.testing.assert_allclose(
        seconds(table, rebuilt, "roofline"), seconds(table, cost, "roofline"), rtol=1e-5
    )


def test_cli_linear_writes_a_cost_config(tmp_path, table, linear_cost):
    path = tmp_path / "measured.csv"
    table.assign(seconds=seconds(table, linear_cost, "linear")).to_csv(path, index=False)
    out, proc = run_cli(tmp_path, "path=measured.csv", f"paths.root={tmp_path}", "form=linear")
    assert proc.returncode == 0, proc.stderr
    doc = OmegaConf.load(out / "calibrated.yaml")
    shipped = OmegaConf.load(CONF / "cost" / "linear.yaml")
    assert list(doc) == list(shipped) and doc.form == "linear" and doc.kv_blocks is None
    for k, v in LINEAR_TRUE.items():
        assert doc[k] == pytest.approx(v, rel=1e-5)
    assert json.loads((out / "calibration.json").read_text())["init"] == "lstsq"
    # the printed hint, followed from an unrelated folder, selects the fitted cost model
    hint = (
        "copy it to <dir>/cost/calibrated.yaml and pass hydra.searchpath=[file://<dir>] "
        "cost=calibrated"
    )
    assert hint in " ".join(proc.stdout.split()) and hint in (out / "calibrated.yaml").read_text()
    (tmp_path / "mine" / "cost").mkdir(parents=True)
    shutil.copy(out / "calibrated.yaml", tmp_path / "mine" / "cost" / "calibrated.yaml")
    cfg = api.compose([f"hydra.searchpath=[file://{tmp_path / 'mine'}]", "cost=calibrated"])
    assert {k: cfg.cost[k] for k in LINEAR_TRUE} == {k: doc[k] for k in LINEAR_TRUE}


def test_cli_bad_input_exits_with_message(tmp_path):
    path = write(tmp_path, HEAD + GOOD + "128,4,4000,-0.5\n")
    _, proc = run_cli(tmp_path, f"path={path}")
    assert proc.returncode == 2
    assert f"{path}:3: column 'seconds' = '-0.5'" in proc.stderr.replace("\n", ""), proc.stderr


@pytest.mark.parametrize("form", ["linear", "roofline"])
def test_a_diverged_fit_is_an_error_not_a_nan_result(form, table, linear_cost):
    """At a learning rate of 1e30 Adam's loss is NaN at every start: no result with NaN."""
    measured = table.assign(seconds=seconds(table, linear_cost, "linear"))
    with pytest.raises(CalibrationError, match=rf"the {form} fit diverged .*lower fit\.lear"):
        if form == "linear":
            cal.fit_cost_model(measured, "linear", learning_rate=1e30, init="scale")
        else:
            fit_roofline(measured, "h100-8b", learning_rate=1e30)


def test_cli_refuses_a_poor_fit_unless_the_threshold_is_raised(tmp_path, table):
    """Step times unrelated to the batch (log-normal noise) fit at ~90% RMS error: exit 2 and
    no output file; with fit.max_rms_rel_error raised the same fit is written."""
    rng = np.random.default_rng(1)
    path = tmp_path / "noise.csv"
    table.assign(seconds=0.01 * np.exp(3 * rng.normal(size=len(table)))).to_csv(path, index=False)
    out, proc = run_cli(tmp_path, f"path={path}", "form=linear", "fit.steps=200")
    assert proc.returncode == 2
    err = proc.stderr.replace("\n", "")
    assert "exceeds fit.max_rms_rel_error=0.5, so no calibrated.yaml was written" in err, err
    assert not (out / "calibrated.yaml").exists() and not (out / "calibration.json").exists()
    assert "RMS relative" in proc.stdout  # the fit is still shown
    out, proc = run_cli(
        tmp_path / "kept",
        f"path={path}",
        "form=linear",
        "fit.steps=200",
        "fit.max_rms_rel_error=100",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "calibration.json").read_text())["rms_rel_error"] > 0.5
    assert (out / "calibrated.yaml").exists()


@pytest.mark.parametrize(
    "row, match",
    [
        ('128,"4\n",4000,0.02\n', r"m\.csv:3: a quoted cell runs over lines 3-4"),
        ("1_28,4,4000,0.02\n", r"m\.csv:3: column 'prefill_tokens' = '1_28'"),
        ("128,4,4000,\u0660.\u0660\u0662\n", r"m\.csv:3: column 'seconds' = "),
    ],
)
def test_measurement_cells_are_read_strictly(tmp_path, row, match):
    """What Python's float() reads but no measurement file means is refused with its line."""
    with pytest.raises(TraceError, match=match):
        cal.load_measurements(write(tmp_path, HEAD + GOOD + row + GOOD))


@pytest.mark.parametrize(
    "overrides, one_row, match",
    [
        (
            ("fit.learning_rate=1e30", "fit.init=scale", "fit.steps=100"),
            False,
            (
                r"m\.csv: the linear fit diverged \(loss nan after 100 Adam steps at "
                r"fit\.learning_rate=1e\+30\); lower fit\.learning_rate \(default 0\.1\)"
            ),
        ),
        (
            ("fit.max_rms_rel_error=nan",),
            False,
            r"error: fit\.max_rms_rel_error: got nan; expected a finite number",
        ),
        (
            (),
            True,
            (
                r"m\.csv: 1 data row\(s\); expected at least 5 to fit the linear form's 5 "
                r"coefficients"
            ),
        ),
    ],
)
def test_cli_refusals_exit_2_and_write_nothing(
    tmp_path, table, linear_cost, overrides, one_row, match
):
    path = write(tmp_path, HEAD + GOOD) if one_row else tmp_path / "m.csv"
    if not one_row:
        table.assign(seconds=seconds(table, linear_cost, "linear")).to_csv(path, index=False)
    out, proc = run_cli(tmp_path, f"path={path}", "form=linear", *overrides)
    assert proc.returncode == 2, proc.stderr
    assert re.search(match, proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "calibrated.yaml").exists() and not (out / "calibration.json").exists()


def test_calibration_json_holds_only_finite_numbers(tmp_path):
    """Collinear columns leave two coefficients undetermined: the file gives their standard
    errors as null and names them, never a bare Infinity or NaN that strict JSON readers
    refuse, and the YAML says so."""
    rng = np.random.default_rng(3)
    decode = rng.integers(1, 200, 60)
    rows = pd.DataFrame(
        {
            "prefill_tokens": 0,
            "decode_seqs": decode,
            "ctx_tokens": 100 * decode,
            "seconds": 0.004 + 2e-4 * decode,
        }
    )
    rows.to_csv(tmp_path / "m.csv", index=False)
    out, proc = run_cli(tmp_path, f"path={tmp_path / 'm.csv'}", "form=linear", "fit.steps=100")
    assert proc.returncode == 0, proc.stderr

    def bare(name):
        raise AssertionError(f"bare {name} in calibration.json")

    doc = json.loads((out / "calibration.json").read_text(), parse_constant=bare)
    # (issue 64) undefined, and said so: not an infinite standard error
    assert doc["undetermined"] and doc["determined"] is False
    assert all(doc["std_errors"][k] is None for k in doc["undetermined"])
    assert "NOT DETERMINED by the measurements" in (out / "calibrated.yaml").read_text()

    def numbers(v):
        if isinstance(v, dict):
            return [x for w in v.values() for x in numbers(w)]
        if isinstance(v, list):
            return [x for w in v for x in numbers(w)]
        return [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else []

    assert all(np.isfinite(numbers(doc)))
