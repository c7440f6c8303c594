"""Export a tuned autoscaler (the `fleet.*` numbers of engine/autoscale.py) as a Kubernetes
HorizontalPodAutoscaler and as a KEDA ScaledObject, each checked against its published schema
(schemas/README.md names them) before any file is written.

Both scale a vLLM Deployment on one of vLLM's per-replica gauges with HPA's AverageValue rule,
desired replicas = ceil(sum of the gauge over the replicas / target), and the same behavior
(stabilization windows; Pods and Percent policies over periodSeconds = interval_s, selectPolicy
Max):
  hpa.yaml: a Pods metric named as the gauge with ":" written "_" (vllm:num_requests_waiting is
    the custom metric vllm_num_requests_waiting), the name a prometheus-adapter rule gives it in
    kubernetes/examples AI/vllm-deployment/hpa (prometheus-adapter.yaml renames
    vllm:num_requests_running to vllm_num_requests_running; horizontal-pod-autoscaler.yaml
    scales on it as type Pods with an AverageValue target). vLLM production-stack's tutorial HPA
    (tutorials/assets/hpa-10.yaml) reads a namespace-wide sum as an Object metric with a Value
    target instead, which counts every vLLM pod of the namespace and is not per replica.
    A Pods metric differs from the simulated rule while replicas start: a pod without the
    metric yet (cold) counts as 0 on a scale-up, which is the simulated ceil(sum / target),
    but as exactly the target on a scale-down (Kubernetes' missing-pods rule,
    replica_calculator.go), which the simulation does not apply: Kubernetes then keeps a
    cold start the simulated autoscaler would cancel.
  keda_scaledobject.yaml: a prometheus trigger whose query sums the gauge over the Deployment's
    pods, metricType AverageValue (KEDA's default): the HPA that KEDA creates is External and
    sets desired = ceil(query value / threshold), the simulated rule. Its sum also counts a
    draining (terminating) pod while Prometheus still scrapes it; the simulation counts only
    serving replicas.

The tuner's numbers are floats (numpy or JAX scalars too). Replicas and Pods-policy values are
rounded to the nearest integer; Percent-policy values too, but a positive one to at least 1 (as
in the simulator, any positive percent moves at least one replica); windows and the period up
to whole seconds: the rules of engine/autoscale.whole, which the simulator runs (deploy/
export.py rounds a tuned fleet with it before it gets here). A policy of 0 is left out (under
selectPolicy Max it never allows the larger change) and a direction with neither policy is
`selectPolicy: Disabled`, as in the simulator.
Where Kubernetes has no per-object setting of a tuned number:
  interval_s: the HPA controller's period is the cluster's --horizontal-pod-autoscaler-sync-period
    (kube-controller-manager, 15 s by default); it is the policies' periodSeconds, the
    ScaledObject's pollingInterval, and an annotation (servetune/interval-seconds).
  tolerance: behavior.scaleUp/scaleDown.tolerance (feature HPAConfigurableTolerance: alpha in
    Kubernetes 1.33 and 1.34, beta and on by default from 1.35; the bundled schema is 1.35's and
    KEDA 2.20's CRD has it), written only when it is not the cluster default 0.1, so that the
    manifests stay portable otherwise; an annotation (servetune/tolerance) records it always.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import textwrap
from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from servetune.core.errors import ConfigError, ServetuneError
from servetune.core.files import write_text

# fleet.metric -> the vLLM gauge it names (vLLM V1's /metrics; kv_cache_usage_perc is a
# fraction of the KV blocks in use, in [0, 1])
VLLM_GAUGES = {
    "num_requests_waiting": "vllm:num_requests_waiting",
    "num_requests_running": "vllm:num_requests_running",
    "kv_cache_usage_perc": "vllm:kv_cache_usage_perc",
}
DEFAULT_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance's default
INT32_MAX = 2**31 - 1
MAX_PERIOD_S = 1800  # HPAScalingPolicy.periodSeconds: in (0, 1800]
MAX_WINDOW_S = 3600  # stabilizationWindowSeconds: in [0, 3600]
HPA_FILE = "hpa.yaml"
KEDA_FILE = "keda_scaledobject.yaml"
ANNOTATION_PREFIX = "servetune/"


@dataclasses.dataclass(frozen=True)
class Schema:
    """A bundled schema: the apiVersion and file of the manifests it checks, and its source."""

    api_version: str
    file: str  # under servetune/deploy/schemas/
    source: str


SCHEMAS = {
    "HorizontalPodAutoscaler": Schema(
        "autoscaling/v2", "hpa-autoscaling-v2-k8s-v1.35.0.json", "Kubernetes v1.35.0"
    ),
    "ScaledObject": Schema(
        "keda.sh/v1alpha1", "keda-scaledobject-v1alpha1-keda-v2.20.2.json", "KEDA v2.20.2 CRD"
    ),
}


@dataclasses.dataclass(frozen=True)
class Direction:
    """One direction's behavior: stabilization window (seconds) and policy values (0: none)."""

    window_s: int
    pods: int  # replicas per period
    percent: int  # % of the current replicas per period


@dataclasses.dataclass(frozen=True)
class Autoscaler:
    """A fleet's autoscaler as Kubernetes takes it: checked, with integers where it needs them."""

    metric: str  # a key of VLLM_GAUGES
    min_replicas: int
    max_replicas: int
    target: float  # per-replica average of the gauge (requests, or a KV fraction)
    tolerance: float  # a fraction of the target
    period_s: int  # interval_s, whole seconds
    up: Direction
    down: Direction

    @property
    def gauge(self) -> str:
        """vLLM's Prometheus name of the metric, e.g. vllm:num_requests_waiting."""
        return VLLM_GAUGES[self.metric]

    @property
    def custom_metric(self) -> str:
        """The custom-metrics API name of the gauge, e.g. vllm_num_requests_waiting."""
        return self.gauge.replace(":", "_")


def read_fleet(fleet: Mapping) -> Autoscaler:
    """The autoscaler of the mapping `fleet` (the fleet.* keys; others are ignored), rounded as
    the module docstring says. ConfigError naming the fleet.<key> and what was expected for a
    missing, non-numeric or non-finite value, min_replicas above max_replicas, a target that is
    not positive (or above 1 for kv_cache_usage_perc), or a value outside Kubernetes' ranges."""
    metric = _metric(fleet)
    lo = _replicas(fleet, "min_replicas", 1)
    hi = _replicas(fleet, "max_replicas", 1)
    if lo > hi:
        raise ConfigError(
            f"fleet.min_replicas: got {lo}, above fleet.max_replicas = {hi}; expected at most it"
        )
    return Autoscaler(
        metric=metric,
        min_replicas=lo,
        max_replicas=hi,
        target=_target(fleet, metric),
        tolerance=_at_least(fleet, "tolerance", 0.0, "a fraction >= 0, e.g. 0.1"),
        period_s=_whole_seconds(fleet, "interval_s", 1, MAX_PERIOD_S),
        up=_direction(fleet, "up"),
        down=_direction(fleet, "down"),
    )


def _value(fleet: Mapping, key: str, expect: str) -> float:
    """fleet[key] as a finite float: a number or a one-element numpy / JAX array; a float32
    (or float16) is read as its shortest decimal (float32 0.8 is 0.8, not 0.800000011920929)."""
    if key not in fleet:
        raise ConfigError(f"fleet.{key}: missing; expected {expect}")
    value = fleet[key]
    shown = value.tolist() if hasattr(value, "tolist") else value  # numpy / JAX: the number
    wrong = ConfigError(f"fleet.{key}: got {shown!r}; expected {expect}")
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise wrong
    try:
        arr = np.asarray(value)
        if arr.dtype.kind not in "iufO" or arr.size != 1:
            raise wrong
        one = arr.reshape(())[()]
        x = float(str(one)) if arr.dtype.kind == "f" and arr.dtype.itemsize < 8 else float(one)
    except (TypeError, ValueError):
        raise wrong from None
    if not math.isfinite(x):
        raise wrong
    return x


def _at_least(fleet: Mapping, key: str, lo: float, expect: str) -> float:
    x = _value(fleet, key, expect)
    if x < lo:
        raise ConfigError(f"fleet.{key}: got {x:g}; expected {expect}")
    return x


def _nearest(x: float) -> int:
    """x (>= 0) rounded to the nearest integer, halves up."""
    return math.floor(x + 0.5)


def _replicas(fleet: Mapping, key: str, lo: int) -> int:
    expect = f"a replica count in [{lo}, {INT32_MAX}]"
    n = _nearest(_at_least(fleet, key, lo - 0.5, expect))
    if n > INT32_MAX:
        raise ConfigError(f"fleet.{key}: got {n}; expected {expect}")
    return n


def _whole_seconds(fleet: Mapping, key: str, lo: int, hi: int) -> int:
    """fleet[key] (seconds) rounded up to whole seconds (float noise under a microsecond
    ignored), within Kubernetes' [lo, hi]."""
    expect = f"seconds within [{lo}, {hi}] once rounded up to whole seconds (Kubernetes' range)"
    x = _at_least(fleet, key, 0.0, expect)
    s = math.ceil(round(x, 6))
    if not lo <= s <= hi:
        raise ConfigError(f"fleet.{key}: got {x:g}; expected {expect}")
    return s


def _metric(fleet: Mapping) -> str:
    expect = f"one of {sorted(VLLM_GAUGES)}"
    if "metric" not in fleet:
        raise ConfigError(f"fleet.metric: missing; expected {expect}")
    metric = fleet["metric"]
    if not isinstance(metric, (str, np.str_)) or str(metric) not in VLLM_GAUGES:
        raise ConfigError(f"fleet.metric: got {metric!r}; expected {expect}")
    return str(metric)


def _target(fleet: Mapping, metric: str) -> float:
    expect = "a positive per-replica average of the metric"
    if metric == "kv_cache_usage_perc":
        expect = "a fraction in (0, 1]: vLLM exports kv_cache_usage_perc as a fraction"
    x = _value(fleet, "target", expect)
    if x <= 0 or (metric == "kv_cache_usage_perc" and x > 1):
        raise ConfigError(f"fleet.target: got {x:g}; expected {expect}")
    return x


def _direction(fleet: Mapping, way: str) -> Direction:
    """fleet.scale_<way>_window_s / _pods / _percent, way "up" or "down"."""
    pods_key, pct_key = f"scale_{way}_pods", f"scale_{way}_percent"
    pods = _nearest(_at_least(fleet, pods_key, 0.0, "a replica count >= 0 (0: no Pods policy)"))
    pct = _at_least(fleet, pct_key, 0.0, "a percent >= 0 (0: no Percent policy)")
    percent = max(_nearest(pct), 1) if pct > 0 else 0
    for key, n in ((pods_key, pods), (pct_key, percent)):
        if n > INT32_MAX:
            raise ConfigError(f"fleet.{key}: got {n}; expected at most {INT32_MAX}")
    window = _whole_seconds(fleet, f"scale_{way}_window_s", 0, MAX_WINDOW_S)
    return Direction(window_s=window, pods=pods, percent=percent)


def quantity(x: float) -> str:
    """`x` (>= 0) as a Kubernetes quantity string in decimal form: a whole number as it is
    ("4"), else in the largest of milli, micro and nano units that holds it whole ("800m" for
    0.8, "2500m" for 2.5, "15u" for 0.000015); finer than a nano, rounded up to nanos, as
    Kubernetes rounds. ValueError for a negative or non-finite x."""
    x = float(x)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{x!r} is not a quantity: expected a finite number >= 0")
    d = Decimal(repr(x))  # the shortest decimal that reads back as x: 0.1 is 100m, not 100.0...1m
    for suffix, exponent in (("", 0), ("m", 3), ("u", 6), ("n", 9)):
        scaled = d.scaleb(exponent)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return f"{int(d.scaleb(9).to_integral_value(rounding=ROUND_CEILING))}n"


QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([numkMGTPE]?)$")
SI_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def quantity_number(text: str) -> float:
    """The number a decimal Kubernetes quantity string means ("800m" -> 0.8, "4" -> 4.0);
    ValueError for other text (binary suffixes such as Ki, exponents, signs)."""
    match = QUANTITY.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a decimal Kubernetes quantity (such as 4 or 800m)")
    digits, suffix = match.groups()
    return float(Decimal(digits).scaleb(SI_EXPONENTS[suffix]))


def _decimal_text(x: float) -> str:
    """`x` in plain decimal digits, no exponent: 4.0 -> "4", 0.8 -> "0.8"."""
    return format(Decimal(repr(float(x))).normalize(), "f")


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _check_name(value, what: str, most: int, dots: bool) -> str:
    """`value` as a Kubernetes name: DNS-1123 labels (joined by dots where `dots`)."""
    labels = str(value).split(".") if dots else [str(value)]
    if (
        not isinstance(value, str)
        or len(value) > most
        or not all(DNS_LABEL.match(label) and len(label) <= 63 for label in labels)
    ):
        kind = "a DNS-1123 subdomain" if dots else "a DNS-1123 label"
        raise ConfigError(
            f"{what}: got {value!r}; expected {kind} of at most {most} characters (lower-case "
            f"letters, digits and '-'{', dot-separated' if dots else ''}, each part starting and "
            f"ending with a letter or digit)"
        )
    return value


def _metadata(name: str, namespace: str | None, scaler: Autoscaler) -> dict:
    meta: dict = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {"app.kubernetes.io/managed-by": "servetune"}
    meta["annotations"] = {
        f"{ANNOTATION_PREFIX}metric": scaler.gauge,
        f"{ANNOTATION_PREFIX}interval-seconds": str(scaler.period_s),
        f"{ANNOTATION_PREFIX}tolerance": _decimal_text(scaler.tolerance),
    }
    return meta


def _rules(way: Direction, scaler: Autoscaler) -> dict:
    """One direction of HPA's behavior (HPAScalingRules)."""
    policies = [
        {"type": kind, "value": value, "periodSeconds": scaler.period_s}
        for kind, value in (("Pods", way.pods), ("Percent", way.percent))
        if value > 0
    ]
    rules: dict = {"stabilizationWindowSeconds": way.window_s}
    if policies:
        rules["selectPolicy"] = "Max"
        rules["policies"] = policies
    else:  # neither policy lets a replica move: the simulator never scales this way
        rules["selectPolicy"] = "Disabled"
    if abs(scaler.tolerance - DEFAULT_TOLERANCE) > 1e-12:
        rules["tolerance"] = quantity(scaler.tolerance)
    return rules


def behavior(scaler: Autoscaler) -> dict:
    """HPA's `behavior` (autoscaling/v2 HorizontalPodAutoscalerBehavior) of `scaler`: per
    direction the stabilization window (seconds), the Pods and Percent policies over
    periodSeconds = the evaluation period, selectPolicy Max, and the tolerance when it is not
    the cluster default."""
    return {"scaleUp": _rules(scaler.up, scaler), "scaleDown": _rules(scaler.down, scaler)}


def _target_ref(deployment_name: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment_name}


def hpa_manifest(fleet: Mapping, deployment_name: str, namespace: str | None = None) -> dict:
    """An autoscaling/v2 HorizontalPodAutoscaler (a dict, as its YAML reads) named like and
    scaling the Deployment `deployment_name`: min/max replicas, one Pods metric (vLLM's gauge
    as the custom metric vllm_<gauge>) with an AverageValue target, a quantity in the gauge's
    unit (requests, or a KV fraction: "800m" is 0.8) per replica, and `behavior` (windows in
    seconds, policies per evaluation period). ConfigError for a bad fleet value or name."""
    scaler = read_fleet(fleet)
    name = _check_name(deployment_name, "deployment_name", 253, dots=True)
    if namespace is not None:
        _check_name(namespace, "namespace", 63, dots=False)
    metric = {
        "type": "Pods",
        "pods": {
            "metric": {"name": scaler.custom_metric},
            "target": {"type": "AverageValue", "averageValue": quantity(scaler.target)},
        },
    }
    return {
        "apiVersion": SCHEMAS["HorizontalPodAutoscaler"].api_version,
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(name, namespace, scaler),
        "spec": {
            "scaleTargetRef": _target_ref(name),
            "minReplicas": scaler.min_replicas,
            "maxReplicas": scaler.max_replicas,
            "metrics": [metric],
            "behavior": behavior(scaler),
        },
    }


# Kubernetes names a Deployment's pods <deployment>-<pod-template-hash>-<5 characters>, cutting
# the part before the 5 characters to 58 (a pod name is at most 63).
_POD_PREFIX = 58
_HASH_MAX = 10


def _promql_string(text: str) -> str:
    """`text` as the inside of a double-quoted PromQL string."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def pod_regex(deployment_name: str) -> str:
    """A Prometheus (RE2, fully anchored) regex matching the names of the pods of the
    Deployment `deployment_name` and not those of a Deployment whose name extends it."""
    literal = lambda name: name.replace(".", r"\.")  # a DNS name's only regex character
    if len(deployment_name) + 2 + _HASH_MAX <= _POD_PREFIX:
        return literal(deployment_name) + "-[a-z0-9]+-[a-z0-9]+"
    return literal(deployment_name[:_POD_PREFIX]) + ".*"  # cut by Kubernetes: a prefix


def prometheus_query(
    scaler: Autoscaler, deployment_name: str, namespace: str | None, model_name: str | None
) -> str:
    """The PromQL sum of vLLM's gauge over the Deployment's pods (and `namespace`, and vLLM's
    `model_name` label, where given): the total the AverageValue rule divides by the target."""
    matchers = []
    if namespace is not None:
        matchers.append(f'namespace="{_promql_string(namespace)}"')
    matchers.append(f'pod=~"{_promql_string(pod_regex(deployment_name))}"')
    if model_name is not None:
        matchers.append(f'model_name="{_promql_string(model_name)}"')
    return f"sum({scaler.gauge}{{{','.join(matchers)}}})"


def keda_manifest(
    fleet: Mapping,
    deployment_name: str,
    namespace: str | None = None,
    prometheus_url: str = "http://prometheus.monitoring:9090",
    model_name: str | None = None,
) -> dict:
    """A keda.sh/v1alpha1 ScaledObject (a dict, as its YAML reads) named like and scaling the
    Deployment `deployment_name`: min/maxReplicaCount, pollingInterval = the evaluation period
    (seconds), one prometheus trigger at `prometheus_url` whose query sums vLLM's gauge over the
    Deployment's pods (of `model_name` where given), metricType AverageValue and threshold =
    the target per replica (a decimal string in the gauge's unit), and the HPA's `behavior`
    under advanced.horizontalPodAutoscalerConfig. ConfigError for a bad fleet value or name."""
    scaler = read_fleet(fleet)
    name = _check_name(deployment_name, "deployment_name", 253, dots=True)
    if namespace is not None:
        _check_name(namespace, "namespace", 63, dots=False)
    if not isinstance(prometheus_url, str) or not re.match(r"^https?://\S+$", prometheus_url):
        raise ConfigError(
            f"prometheus_url: got {prometheus_url!r}; expected an http:// or https:// address"
        )
    if model_name is not None and (not isinstance(model_name, str) or not model_name):
        raise ConfigError(f"model_name: got {model_name!r}; expected vLLM's served model name")
    trigger = {
        "type": "prometheus",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": prometheus_url,
            "query": prometheus_query(scaler, name, namespace, model_name),
            "threshold": _decimal_text(scaler.target),
        },
    }
    return {
        "apiVersion": SCHEMAS["ScaledObject"].api_version,
        "kind": "ScaledObject",
        "metadata": _metadata(name, namespace, scaler),
        "spec": {
            "scaleTargetRef": _target_ref(name),
            "pollingInterval": scaler.period_s,
            "minReplicaCount": scaler.min_replicas,
            "maxReplicaCount": scaler.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior(scaler)}},
            "triggers": [trigger],
        },
    }


def _strict(node):
    """A copy of an OpenAPI v3 schema in which an object that lists its properties allows no
    others (the API server's strict field validation, kubectl's default, refuses unknown
    fields; the CRD's schema only prunes them)."""
    if isinstance(node, list):
        return [_strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()}
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def schema(kind: str) -> dict:
    """The bundled JSON schema of manifests of `kind` ("HorizontalPodAutoscaler" or
    "ScaledObject"; the ScaledObject's made strict, see _strict). ConfigError for another
    kind."""
    if kind not in SCHEMAS:
        raise ConfigError(f"kind: got {kind!r}; expected one of {sorted(SCHEMAS)}")
    doc = json.loads(_schema_text(SCHEMAS[kind].file))
    return _strict(doc) if kind == "ScaledObject" else doc


@functools.cache
def _schema_text(file: str) -> str:
    return (resources.files("servetune.deploy") / "schemas" / file).read_text(encoding="utf-8")


@functools.cache
def _validator(kind: str):
    """A jsonschema validator of `kind` (imported here: only validation needs it). The HPA's
    schema names its draft (2020-12); an OpenAPI v3 schema (the CRD's) is read as draft 4."""
    try:
        import jsonschema
    except ModuleNotFoundError as err:
        raise ServetuneError(
            "validating a Kubernetes manifest needs the jsonschema package, a dependency of "
            "servetune: pip install jsonschema (or reinstall servetune)"
        ) from err
    doc = schema(kind)
    cls = jsonschema.validators.validator_for(doc, default=jsonschema.Draft4Validator)
    return cls(doc)


def _path(parts) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the manifest)"


def validate(manifest: dict, kind: str) -> None:
    """Check `manifest` (a dict as its YAML reads) against the published schema of `kind`
    ("HorizontalPodAutoscaler": Kubernetes' autoscaling/v2, strict; "ScaledObject": KEDA's
    CRD, made strict) and its apiVersion and kind. ConfigError naming the field's path (such as
    spec.minReplicas), what was wrong and the schema; ServetuneError without jsonschema."""
    spec = SCHEMAS.get(kind)
    if spec is None:
        raise ConfigError(f"kind: got {kind!r}; expected one of {sorted(SCHEMAS)}")
    where = f"{kind} manifest (schema {spec.file}, {spec.source})"
    got = (manifest.get("apiVersion"), manifest.get("kind"))
    if got != (spec.api_version, kind):
        raise ConfigError(
            f"{where}: apiVersion, kind: got {got[0]!r}, {got[1]!r}; expected "
            f"{spec.api_version!r}, {kind!r}"
        )
    validator = _validator(kind)  # says how to install jsonschema where it is missing
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(manifest))
    if error is not None:
        raise ConfigError(f"{where}: {_path(error.absolute_path)}: {error.message}")


def _policy_text(way: Direction, scaler: Autoscaler) -> str:
    """How far one evaluation may move the replicas one way, in words."""
    allowed = [f"{way.pods} pods"] if way.pods else []
    allowed += [f"{way.percent}%"] if way.percent else []
    if not allowed:
        return "disabled"
    most = allowed[0] if len(allowed) == 1 else f"the larger of {allowed[0]} and {allowed[1]}"
    return f"{most} per {scaler.period_s}s, window {way.window_s}s"


def _tolerance_text(scaler: Autoscaler) -> str:
    tol = _decimal_text(scaler.tolerance)
    if "tolerance" not in behavior(scaler)["scaleUp"]:
        return f"Tolerance {tol}: the cluster default (--horizontal-pod-autoscaler-tolerance)."
    return (
        f"Tolerance {tol}, set in behavior.scaleUp/scaleDown.tolerance: Kubernetes 1.35+ "
        "(HPAConfigurableTolerance, beta; alpha and off by default in 1.33 and 1.34); a cluster "
        "without the feature drops the field and applies --horizontal-pod-autoscaler-tolerance."
    )


def _comment(blocks: list) -> str:
    """YAML comment lines: a str block wrapped at 96 columns, a list block line by line."""
    lines: list[str] = []
    for block in blocks:
        lines += textwrap.wrap(block, 96) if isinstance(block, str) else block
    return "".join(f"# {line}\n" for line in lines)


def _limits_text(scaler: Autoscaler) -> str:
    return (
        f"within [{scaler.min_replicas}, {scaler.max_replicas}]. Scale-up: "
        f"{_policy_text(scaler.up, scaler)}; scale-down: {_policy_text(scaler.down, scaler)}."
    )


def hpa_header(scaler: Autoscaler, deployment_name: str) -> str:
    """The comment atop hpa.yaml: what it is, its vLLM metric, the adapter rule it needs, and
    the settings Kubernetes keeps cluster-wide."""
    m, t, name = scaler.gauge, _decimal_text(scaler.target), scaler.custom_metric
    return _comment(
        [
            f"HorizontalPodAutoscaler (autoscaling/v2) written by servetune: the tuned autoscaler "
            f'of the vLLM Deployment "{deployment_name}". Metric: vLLM\'s gauge {m}, read per pod '
            f"as the custom metric {name} (type Pods), target {t} per replica: desired replicas "
            f"= ceil(sum over the pods / {t}), {_limits_text(scaler)}",
            "It needs an adapter serving that custom metric, e.g. a prometheus-adapter rule:",
            [
                f'  - seriesQuery: \'{m}{{namespace!="",pod!=""}}\'',
                "    resources: {overrides: {namespace: {resource: namespace}, "
                "pod: {resource: pod}}}",
                f'    name: {{matches: "^{m}$", as: "{name}"}}',
                "    metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'",
            ],
            f"Simulated evaluation period: {scaler.period_s} s (the policies' periodSeconds); the "
            "HPA controller's is the cluster's --horizontal-pod-autoscaler-sync-period (15 s by "
            "default).",
            _tolerance_text(scaler),
            f"Apply this file or {KEDA_FILE}, not both: two autoscalers of one Deployment fight.",
        ]
    )


def keda_header(scaler: Autoscaler, deployment_name: str) -> str:
    """The comment atop keda_scaledobject.yaml: what it is, its vLLM metric and rule, and what
    its polling interval does."""
    t = _decimal_text(scaler.target)
    return _comment(
        [
            f"KEDA ScaledObject (keda.sh/v1alpha1) written by servetune: the tuned autoscaler of "
            f'the vLLM Deployment "{deployment_name}". Metric: vLLM\'s gauge {scaler.gauge}, '
            f"summed over the Deployment's pods by the trigger's Prometheus query; metricType "
            f"AverageValue: the HPA that KEDA creates sets desired replicas = ceil(query value / "
            f"{t}), {_limits_text(scaler)}",
            f"pollingInterval {scaler.period_s} s (the simulated evaluation period) is how often "
            "KEDA polls Prometheus itself (and refreshes its metric cache with useCachedMetrics); "
            "the HPA it creates evaluates at the cluster's --horizontal-pod-autoscaler-sync-period "
            "(15 s by default), like any HPA.",
            _tolerance_text(scaler),
            f"Apply this file or {HPA_FILE}, not both: two autoscalers of one Deployment fight.",
        ]
    )


def manifest_text(header: str, manifest: Mapping) -> str:
    """`header` then `manifest` as block YAML, keys in their order, long strings unwrapped."""
    body = yaml.safe_dump(dict(manifest), sort_keys=False, default_flow_style=False, width=2**16)
    return header + body


def write_autoscaler(
    out_dir: Path,
    fleet: Mapping,
    deployment_name: str,
    namespace: str | None = None,
    prometheus_url: str = "http://prometheus.monitoring:9090",
    model_name: str | None = None,
) -> dict[str, Path]:
    """Write hpa.yaml (hpa_manifest) and keda_scaledobject.yaml (keda_manifest) into
    `out_dir`, each whole (core.files.write_text) with a header comment, after both are built
    and validated: a bad fleet value or a manifest its schema refuses raises ConfigError and
    writes nothing. Returns {"hpa": path, "keda": path}."""
    scaler = read_fleet(fleet)
    hpa = hpa_manifest(fleet, deployment_name, namespace)
    keda = keda_manifest(fleet, deployment_name, namespace, prometheus_url, model_name)
    validate(hpa, "HorizontalPodAutoscaler")
    validate(keda, "ScaledObject")
    texts = {
        HPA_FILE: manifest_text(hpa_header(scaler, deployment_name), hpa),
        KEDA_FILE: manifest_text(keda_header(scaler, deployment_name), keda),
    }
    out_dir = Path(out_dir)
    paths = {name: write_text(out_dir / name, text) for name, text in texts.items()}
    return {"hpa": paths[HPA_FILE], "keda": paths[KEDA_FILE]}
