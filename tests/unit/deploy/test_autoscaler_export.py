"""deploy/autoscaler_export.py: the tuned autoscaler as a Kubernetes HorizontalPodAutoscaler and
a KEDA ScaledObject, checked against the bundled published schemas (which must refuse a broken
manifest, or the check is vacuous), refused with the fleet key named for bad values, written
whole or not at all, and read back with the fleet's numbers."""

from __future__ import annotations

import copy
import fnmatch
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import servetune
from servetune.core.errors import ConfigError
from servetune.deploy import autoscaler_export as ax

HPA, KEDA = "HorizontalPodAutoscaler", "ScaledObject"
# conf/config.yaml's fleet defaults (HPA's), plus a key the exporter does not read
FLEET = {
    "min_replicas": 1.0,
    "max_replicas": 4.0,
    "metric": "num_requests_waiting",
    "target": 4.0,
    "tolerance": 0.1,
    "interval_s": 15.0,
    "scale_up_window_s": 0.0,
    "scale_down_window_s": 300.0,
    "scale_up_pods": 4.0,
    "scale_up_percent": 100.0,
    "scale_down_pods": 0.0,
    "scale_down_percent": 100.0,
    "cold_start_s": 76.0,
}
TARGETS = {"num_requests_waiting": 4.0, "num_requests_running": 24.0, "kv_cache_usage_perc": 0.8}


def fleet(**changes) -> dict:
    return {**FLEET, **changes}


def manifests(f=None, **kw) -> tuple[dict, dict]:
    f = FLEET if f is None else f
    ns = kw.pop("namespace", "serving")
    return ax.hpa_manifest(f, "llama-8b", ns), ax.keda_manifest(f, "llama-8b", ns, **kw)


@pytest.mark.parametrize(
    "x, text",
    [(0.8, "800m"), (4, "4"), (2.5, "2500m"), (0.1, "100m"), (0.0, "0"), (12.0, "12")]
    + [(0.0015, "1500u"), (1e-6, "1u"), (3e-9, "3n"), (1e-10, "1n"), (np.float64(0.05), "50m")],
)
def test_the_quantity_formatter_writes_kubernetes_decimal_quantities(x, text):
    assert ax.quantity(x) == text
    if x >= 1e-9:
        assert ax.quantity_number(text) == pytest.approx(float(x), rel=1e-12)


@pytest.mark.parametrize("x", [-0.5, math.nan, math.inf])
def test_the_quantity_formatter_refuses_what_no_quantity_is(x):
    with pytest.raises(ValueError):
        ax.quantity(x)


@pytest.mark.parametrize("text", ["1Ki", "-1", "1e3", "m", "0.5x", ""])
def test_quantity_number_reads_only_decimal_quantities(text):
    with pytest.raises(ValueError):
        ax.quantity_number(text)


@pytest.mark.parametrize("metric", sorted(TARGETS))
def test_both_manifests_validate_for_each_metric(metric):
    f = fleet(metric=metric, target=TARGETS[metric])
    hpa, keda = manifests(f, model_name="meta-llama/Llama-3.1-8B")
    ax.validate(hpa, HPA)
    ax.validate(keda, KEDA)
    (pods,) = hpa["spec"]["metrics"]
    assert pods["type"] == "Pods"
    assert pods["pods"]["metric"]["name"] == f"vllm_{metric}"
    assert pods["pods"]["target"] == {
        "type": "AverageValue",
        "averageValue": ax.quantity(TARGETS[metric]),
    }
    (trigger,) = keda["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["query"].startswith(f"sum(vllm:{metric}{{")
    assert float(trigger["metadata"]["threshold"]) == TARGETS[metric]
    assert (
        keda["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        == (hpa["spec"]["behavior"])
    )


def test_the_metric_table_is_the_simulators():
    from servetune.core.types import AUTOSCALE_METRICS

    assert tuple(ax.VLLM_GAUGES) == AUTOSCALE_METRICS
    assert all(g == f"vllm:{m}" for m, g in ax.VLLM_GAUGES.items())


def test_the_default_fleet_is_hpas_default_behavior():
    hpa, keda = manifests(namespace=None)
    assert "namespace" not in hpa["metadata"]
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "llama-8b",
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 4)
    assert spec["behavior"] == {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ],
        },
        "scaleDown": {  # scale_down_pods 0: no Pods policy (it never allows the larger change)
            "stabilizationWindowSeconds": 300,
            "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
        },
    }  # tolerance 0.1 is the cluster default: no field, portable to any Kubernetes
    assert hpa["metadata"]["annotations"] == {
        "servetune/metric": "vllm:num_requests_waiting",
        "servetune/interval-seconds": "15",
        "servetune/tolerance": "0.1",
    }
    assert keda["spec"]["pollingInterval"] == 15
    assert (keda["spec"]["minReplicaCount"], keda["spec"]["maxReplicaCount"]) == (1, 4)


def test_a_tolerance_other_than_the_default_is_set_per_direction():
    hpa, keda = manifests(fleet(tolerance=0.05))
    ax.validate(hpa, HPA)
    ax.validate(keda, KEDA)
    for rules in hpa["spec"]["behavior"].values():
        assert rules["tolerance"] == "50m"
    assert hpa["metadata"]["annotations"]["servetune/tolerance"] == "0.05"


def test_a_direction_without_a_policy_is_disabled():
    hpa, keda = manifests(fleet(scale_down_pods=0.0, scale_down_percent=0.0))
    ax.validate(hpa, HPA)
    ax.validate(keda, KEDA)
    assert hpa["spec"]["behavior"]["scaleDown"] == {
        "stabilizationWindowSeconds": 300,
        "selectPolicy": "Disabled",
    }


def test_tuner_numbers_are_rounded_as_documented():
    import jax  # device_put: a JAX array without compiling anything

    f = fleet(
        min_replicas=np.float32(1.4),  # nearest
        max_replicas=jax.device_put(np.float64(3.6)),
        target=jax.device_put(np.float32(0.8)),  # read as 0.8, not 0.800000011920929
        metric=np.str_("kv_cache_usage_perc"),
        interval_s=np.float64(14.2),  # whole seconds, up
        scale_up_window_s=0.2,
        scale_down_window_s=299.99999999,  # float noise, not a second more
        scale_up_pods=2.5,  # halves up
        scale_up_percent=0.3,  # a positive percent moves at least one replica
        scale_down_pods=np.int64(1),
        scale_down_percent=49.5,
    )
    scaler = ax.read_fleet(f)
    assert scaler == ax.Autoscaler(
        metric="kv_cache_usage_perc",
        min_replicas=1,
        max_replicas=4,
        target=0.8,
        tolerance=0.1,
        period_s=15,
        up=ax.Direction(window_s=1, pods=3, percent=1),
        down=ax.Direction(window_s=300, pods=1, percent=50),
    )
    hpa, keda = manifests(f)
    assert hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "800m"
    assert keda["spec"]["triggers"][0]["metadata"]["threshold"] == "0.8"


BAD_FLEETS = [
    ({"min_replicas": 5.0}, "fleet.min_replicas", "above fleet.max_replicas"),
    ({"min_replicas": 0.0}, "fleet.min_replicas", "replica count"),
    ({"target": math.nan}, "fleet.target", "positive"),
    ({"target": math.inf}, "fleet.target", "positive"),
    ({"target": 0.0}, "fleet.target", "positive"),
    ({"target": -2.0}, "fleet.target", "positive"),
    ({"metric": "kv_cache_usage_perc", "target": 1.5}, "fleet.target", "fraction"),
    ({"metric": "gpu_util"}, "fleet.metric", "num_requests_waiting"),
    ({"tolerance": -0.1}, "fleet.tolerance", ">= 0"),
    ({"interval_s": 0.0}, "fleet.interval_s", "[1, 1800]"),
    ({"interval_s": 3600.0}, "fleet.interval_s", "[1, 1800]"),
    ({"scale_down_window_s": 4000.0}, "fleet.scale_down_window_s", "[0, 3600]"),
    ({"scale_up_pods": np.float64(math.inf)}, "fleet.scale_up_pods", "replica count"),
    ({"scale_up_percent": -1.0}, "fleet.scale_up_percent", "percent"),
    ({"max_replicas": True}, "fleet.max_replicas", "replica count"),
    ({"max_replicas": "4"}, "fleet.max_replicas", "replica count"),
    ({"max_replicas": np.array([4.0, 5.0])}, "fleet.max_replicas", "replica count"),
]


@pytest.mark.parametrize("changes, key, expect", BAD_FLEETS)
def test_a_bad_fleet_value_is_refused_naming_its_key(changes, key, expect):
    for build in (ax.hpa_manifest, ax.keda_manifest):
        with pytest.raises(ConfigError, match=re.escape(key)) as err:
            build(fleet(**changes), "llama-8b")
        assert expect in str(err.value)


def test_a_missing_fleet_key_is_named():
    f = fleet()
    del f["scale_down_window_s"]
    with pytest.raises(ConfigError, match=r"fleet\.scale_down_window_s: missing"):
        ax.hpa_manifest(f, "llama-8b")


@pytest.mark.parametrize(
    "kw, key",
    [
        ({"deployment_name": "Llama_8B"}, "deployment_name"),
        ({"deployment_name": "-llama"}, "deployment_name"),
        ({"namespace": "a.b"}, "namespace"),
        ({"prometheus_url": "prometheus:9090"}, "prometheus_url"),
        ({"model_name": ""}, "model_name"),
    ],
)
def test_bad_names_are_refused(kw, key):
    args = {"deployment_name": "llama-8b", "namespace": None, **kw}
    with pytest.raises(ConfigError, match=key):
        ax.keda_manifest(FLEET, **args)


def _broken(manifest: dict, path: str, value=None, delete=False) -> dict:
    """A deep copy of `manifest` with the value at dotted `path` set (or deleted)."""
    out = copy.deepcopy(manifest)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = out
    for p in parents:
        node = node[p]
    if delete:
        del node[last]
    else:
        node[last] = value
    return out


# each breaks the schema in a way the schema itself (not servetune's own checks) must catch
SCHEMA_BREAKS = [
    (HPA, "spec.minReplicas", "2", False, "spec.minReplicas"),
    (HPA, "spec.minReplica", 2, False, "spec"),  # an unknown field: the strict schema
    (HPA, "spec.scaleTargetRef", None, True, "spec"),  # required
    (HPA, "spec.behavior.scaleUp.policies.0.periodSeconds", None, True, "policies[0]"),
    (HPA, "spec.metrics.0.pods.target.averageValue", [0.8], False, "averageValue"),
    (HPA, "metadata.annotations.servetune/tolerance", 0.1, False, "annotations"),
    (KEDA, "spec.minReplicaCount", "1", False, "spec.minReplicaCount"),
    (KEDA, "spec.pollingInteval", 15, False, "spec"),  # unknown: made strict
    (KEDA, "spec.pollingInterval", 0, False, "spec.pollingInterval"),  # minimum 1
    (KEDA, "spec.triggers", [], False, "spec.triggers"),  # minItems 1
    (KEDA, "spec.triggers.0.metadata.threshold", 4, False, "threshold"),  # strings only
    (
        KEDA,
        "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp.tolerance",
        "x",
        False,
        "tolerance",
    ),  # not a quantity
]


@pytest.mark.parametrize("kind, path, value, delete, where", SCHEMA_BREAKS)
def test_the_schemas_refuse_a_broken_manifest(kind, path, value, delete, where):
    hpa, keda = manifests(fleet(tolerance=0.05))
    good = hpa if kind == HPA else keda
    ax.validate(good, kind)
    with pytest.raises(ConfigError, match=re.escape(where)) as err:
        ax.validate(_broken(good, path, value, delete), kind)
    assert kind in str(err.value) and ax.SCHEMAS[kind].file in str(err.value)


def test_validate_checks_the_kind_and_api_version():
    hpa, keda = manifests()
    with pytest.raises(ConfigError, match="apiVersion"):
        ax.validate(keda, HPA)
    with pytest.raises(ConfigError, match="apiVersion"):
        ax.validate(_broken(keda, "apiVersion", "keda.sh/v1"), KEDA)
    with pytest.raises(ConfigError, match="kind"):
        ax.validate(hpa, "Deployment")


def test_the_bundled_schemas_are_valid_schemas_and_ship_in_the_wheel():
    from jsonschema import Draft4Validator, Draft202012Validator

    Draft202012Validator.check_schema(ax.schema(HPA))
    Draft4Validator.check_schema(ax.schema(KEDA))
    assert ax.schema(HPA)["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    here = Path(ax.__file__).parent / "schemas"
    readme = (here / "README.md").read_text()
    for spec in ax.SCHEMAS.values():
        assert (here / spec.file).is_file() and spec.file in readme
    root = Path(servetune.__file__).parents[2]
    pyproject = (root / "pyproject.toml").read_text()
    data = re.search(r'^"servetune\.deploy" = \[(.*)\]$', pyproject, re.M)
    assert data, "pyproject.toml: package data of servetune.deploy"
    globs = re.findall(r'"([^"]+)"', data.group(1))
    for spec in ax.SCHEMAS.values():
        assert any(fnmatch.fnmatch(f"schemas/{spec.file}", g) for g in globs)


def test_the_prometheus_query_sums_the_deployments_pods():
    scaler = ax.read_fleet(FLEET)
    query = ax.prometheus_query(scaler, "llama-8b", "serving", 'model "x"')
    assert query == (
        'sum(vllm:num_requests_waiting{namespace="serving",'
        'pod=~"llama-8b-[a-z0-9]+-[a-z0-9]+",model_name="model \\"x\\""})'
    )
    assert ax.prometheus_query(scaler, "llama-8b", None, None) == (
        'sum(vllm:num_requests_waiting{pod=~"llama-8b-[a-z0-9]+-[a-z0-9]+"})'
    )
    pods = re.compile(ax.pod_regex("llama-8b"))  # Prometheus anchors regex matchers: fullmatch
    assert pods.fullmatch("llama-8b-5d4f8c7b9-x2x7k")
    assert not pods.fullmatch("llama-8b-small-5d4f8c7b9-x2x7k")
    assert not pods.fullmatch("other-llama-8b-5d4f8c7b9-x2x7k")
    assert re.compile(ax.pod_regex("llama.v3")).fullmatch("llama.v3-5d4f8c7b9-x2x7k")
    assert not re.compile(ax.pod_regex("llama.v3")).fullmatch("llamaxv3-5d4f8c7b9-x2x7k")
    long = "a" * 60  # Kubernetes cuts a pod's name before its 5 random characters to 58
    assert re.compile(ax.pod_regex(long)).fullmatch("a" * 58 + "x2x7k")


def test_write_autoscaler_writes_both_files_that_read_back_as_the_fleet(tmp_path):
    f = fleet(
        metric="kv_cache_usage_perc",
        target=0.75,
        tolerance=0.02,
        interval_s=30.0,
        scale_up_window_s=60.0,
        scale_down_window_s=600.0,
        scale_up_pods=2.0,
        scale_up_percent=50.0,
        scale_down_pods=1.0,
        scale_down_percent=10.0,
        max_replicas=8.0,
        min_replicas=2.0,
    )
    paths = ax.write_autoscaler(tmp_path / "out", f, "llama-8b", "serving", model_name="llama")
    assert paths == {
        "hpa": tmp_path / "out" / "hpa.yaml",
        "keda": tmp_path / "out" / "keda_scaledobject.yaml",
    }
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        ["hpa.yaml", "keda_scaledobject.yaml"]
    )
    hpa_text, keda_text = paths["hpa"].read_text(), paths["keda"].read_text()
    assert hpa_text.startswith("# HorizontalPodAutoscaler (autoscaling/v2)")
    assert keda_text.startswith("# KEDA ScaledObject (keda.sh/v1alpha1)")
    for text in (hpa_text, keda_text):
        assert "vllm:kv_cache_usage_perc" in text.split("apiVersion:")[0]
    hpa, keda = yaml.safe_load(hpa_text), yaml.safe_load(keda_text)
    ax.validate(hpa, HPA)
    ax.validate(keda, KEDA)
    assert hpa == ax.hpa_manifest(f, "llama-8b", "serving")

    spec, kspec = hpa["spec"], keda["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (f["min_replicas"], f["max_replicas"])
    assert (kspec["minReplicaCount"], kspec["maxReplicaCount"]) == (
        spec["minReplicas"],
        spec["maxReplicas"],
    )
    target = spec["metrics"][0]["pods"]["target"]["averageValue"]
    assert ax.quantity_number(target) == f["target"]
    assert float(kspec["triggers"][0]["metadata"]["threshold"]) == f["target"]
    assert kspec["pollingInterval"] == f["interval_s"]
    assert float(hpa["metadata"]["annotations"]["servetune/tolerance"]) == f["tolerance"]
    for behavior in (
        spec["behavior"],
        kspec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"],
    ):
        for way, rules in (("up", behavior["scaleUp"]), ("down", behavior["scaleDown"])):
            assert rules["stabilizationWindowSeconds"] == f[f"scale_{way}_window_s"]
            assert ax.quantity_number(rules["tolerance"]) == f["tolerance"]
            values = {p["type"]: p["value"] for p in rules["policies"]}
            assert values == {"Pods": f[f"scale_{way}_pods"], "Percent": f[f"scale_{way}_percent"]}
            assert {p["periodSeconds"] for p in rules["policies"]} == {f["interval_s"]}


def test_a_bad_fleet_or_a_refused_manifest_writes_nothing(tmp_path, monkeypatch):
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="fleet.target"):
        ax.write_autoscaler(out, fleet(target=math.nan), "llama-8b")
    assert not out.exists() or list(out.iterdir()) == []
    # the HPA is fine, the ScaledObject breaks its schema: neither file is written
    broken = ax.keda_manifest
    monkeypatch.setattr(
        ax, "keda_manifest", lambda *a, **k: _broken(broken(*a, **k), "spec.minReplicaCount", "1")
    )
    with pytest.raises(ConfigError, match="spec.minReplicaCount"):
        ax.write_autoscaler(out, FLEET, "llama-8b")
    assert not out.exists() or list(out.iterdir()) == []
