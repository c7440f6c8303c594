"""`servetune validate` (servetune/validate/predict.py): the error statistics in closed form,
and the whole loop on observations made by servetune itself with a known cost (calibration
recovers it, so the prediction errors vanish); bad folders are refused by name."""

import json

import numpy as np
import pandas as pd
import pytest

from servetune import workload
from servetune.api import simulate
from servetune.validate import predict

COST = {"base_s": 0.004, "per_prefill_token_s": 3e-5, "per_decode_seq_s": 4e-4,
        "per_ctx_token_s": 2e-7}
META = {"trace": str(workload.bundled_path("azure_llm_2023_conv.csv")), "start_s": 0.0,
        "duration_s": 30.0, "rate_scale": 1.0, "max_requests": 40,
        "engine": {"max_num_seqs": 16, "max_num_batched_tokens": 2048, "num_gpu_blocks": 512,
                   "block_size": 32, "max_model_len": 8192, "enable_prefix_caching": False,
                   "seed": 0}}


def test_errors_of_a_prediction_10_percent_high():
    obs = pd.DataFrame({m: np.linspace(0.1, 2.0, 50) for m in predict.METRICS})
    out = predict.compare(obs * 1.1, obs)
    for m in predict.METRICS:
        for s in predict.STATS:
            assert out[m][s]["rel_error"] == pytest.approx(0.1)
        assert out[m]["per_request_rel_error"]["p90"] == pytest.approx(0.1)
    with pytest.raises(predict.TraceError, match="40 and 50 requests"):
        predict.compare(obs.iloc[:40], obs)


def _fake_observation(folder, meta, cost, rng):
    """An observe folder whose requests are servetune's under `cost`, with exact step times."""
    folder.mkdir()
    (folder / "observe.json").write_text(json.dumps(meta))
    simulate(predict.overrides_for(meta, cost)).requests[0].to_parquet(
        folder / "requests.parquet")
    steps = pd.DataFrame({"prefill_tokens": rng.integers(0, 2048, 400),
                          "decode_seqs": rng.integers(1, 16, 400),
                          "ctx_tokens": rng.integers(0, 50_000, 400)})
    steps["seconds"] = (cost["base_s"] + cost["per_prefill_token_s"] * steps.prefill_tokens
                        + cost["per_decode_seq_s"] * steps.decode_seqs
                        + cost["per_ctx_token_s"] * steps.ctx_tokens)
    steps.to_csv(folder / "steps.csv", index=False)


def test_validating_against_observations_with_a_known_cost_finds_no_error(tmp_path, capsys):
    rng = np.random.default_rng(0)
    _fake_observation(tmp_path / "A", META, COST, rng)
    _fake_observation(tmp_path / "B", {**META, "start_s": 60.0}, COST, rng)
    rc = predict.main(["--calibrate-on", str(tmp_path / "A"), "--predict", str(tmp_path / "B"),
                       "--noise-floor", str(tmp_path / "B"), "--out", str(tmp_path / "v")])
    assert rc == 0
    report = json.loads((tmp_path / "v" / "validation.json").read_text())
    for k, v in COST.items():
        assert report["calibration"]["coefficients"][k] == pytest.approx(v, rel=1e-3)
    for m in predict.METRICS:
        assert abs(report["prediction"][m]["mean"]["rel_error"]) < 1e-3
        assert report["noise_floor"][m]["per_request_rel_error"]["p90"] == 0.0
    assert (tmp_path / "v" / "validation_cdf.png").stat().st_size > 0
    assert "prediction: relative error" in capsys.readouterr().out


def test_a_folder_that_is_not_an_observation_is_named(tmp_path, capsys):
    rc = predict.main(["--calibrate-on", str(tmp_path), "--predict", str(tmp_path)])
    assert rc == 2
    assert f"{tmp_path}/observe.json: missing" in capsys.readouterr().err


def test_overrides_simulate_the_blocks_and_watermark_vllm_ran_with():
    # vLLM takes one of --num-gpu-blocks-override's blocks as its null block; an observation
    # without a watermark (made before observe had the flag) ran with vLLM's 0
    out = predict.overrides_for({**META, "engine": {**META["engine"], "watermark": 0.05}},
                                {k: np.float64(v) for k, v in COST.items()})
    assert "cost.kv_blocks=511" in out and "policy.watermark=0.05" in out
    assert "cost.base_s=0.004" in out  # a numpy float reads back as a plain number
    assert "policy.watermark=0.0" in predict.overrides_for(META, COST)
