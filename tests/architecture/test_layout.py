"""The package's shape: no import cycles (a module imports another, directly or through a chain,
only if that one does not import it back), imports at module level except where a heavy plotting
or statistics dependency is deferred, no private name imported across modules, and no public
name of `servetune` that is also the name of one of its modules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

import servetune

SRC = Path(servetune.__file__).parent
# reporting defers matplotlib, plotly and scipy (imported by the modules it imports lazily)
# to the commands that draw or aggregate, so a Hydra job's callback stays light; the commands
# (cli/) parse their arguments, and hydra_apps lets Hydra answer --help, before loading what
# they run, so a command's help is instant
DEFERRED_OK = ("servetune.reporting", "servetune.cli")


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = ("servetune",) + path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path):
    """(target module, imported names, whether inside a function, line) of each servetune
    import in module `name`; relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    in_function = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("servetune"):
                    yield alias.name, (), id(node) in in_function, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.startswith("servetune"):
                names = tuple(a.name for a in node.names)
                yield base, names, id(node) in in_function, node.lineno


def _graph() -> dict[str, set[str]]:
    """Module -> modules its import statements execute: the target, every package above it
    (importing a.b.c runs a/__init__ and a/b/__init__), and a submodule imported by name."""
    graph = {}
    for name, path in MODULES.items():
        edges = set()
        for target, names, _, _ in _imports(name, path):
            parts = target.split(".")
            edges.update(".".join(parts[:k]) for k in range(2, len(parts) + 1))
            edges.update(f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES)
        graph[name] = {
            e for e in edges if e in MODULES and e != name and not name.startswith(e + ".")
        }  # a package's own parents run first
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root, children in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(children)))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = _graph()
    assert len(graph) > 60 and graph["servetune.run.driver"] >= {
        "servetune.engine.loop",
        "servetune.run.shard",
    }
    assert _cycles(graph) == []


def test_imports_are_at_module_level():
    deferred = [
        f"{path.name}:{line} imports {target}"
        for name, path in MODULES.items()
        if not name.startswith(DEFERRED_OK)
        for target, _, inside, line in _imports(name, path)
        if inside
    ]
    assert deferred == []


def test_no_private_name_is_imported_across_modules():
    private = [
        f"{name}:{line} imports {target}.{n}"
        for name, path in MODULES.items()
        for target, names, _, line in _imports(name, path)
        for n in names
        if n.startswith("_") and n != "__version__"
    ]
    assert private == []


@pytest.mark.parametrize("public", servetune.__all__)
def test_public_names_are_not_module_names(public):
    assert f"servetune.{public}" not in MODULES
    assert getattr(servetune, public) is not None


def test_random_streams_are_distinct_and_only_in_their_table():
    from servetune.core import streams

    assert len(set(streams.ALL.values())) == len(streams.ALL) >= 10
    draws = {
        (MODULES[name].name, line.strip())
        for name in MODULES
        if name != "servetune.core.streams"
        for line in MODULES[name].read_text().splitlines()
        if "default_rng(" in line
    }
    # the generators streams.py names as outside its table, each for a stated reason
    assert draws == {
        ("traces.py", "rng = np.random.default_rng(seed)"),
        (
            "es.py",
            ("return np.random.default_rng([seed, iteration]).standard_normal((pairs, dim))"),
        ),
        ("stats.py", "rng = np.random.default_rng(seed)"),
        ("evaluation.py", "rng = np.random.default_rng(n)"),
        ("oracle.py", "rng = np.random.default_rng([domain, int(key) & _MASK64])"),
        ("observe.py", "rng = np.random.default_rng(es.seed)"),
    }


def test_policy_fields_are_one_table():
    import dataclasses

    from servetune.config import policy
    from servetune.core.types import PolicyParams

    declared = [f.name for f in dataclasses.fields(PolicyParams) if f.name != "score_net"]
    assert declared == list(policy.FIELDS)
    assert all(f.lo <= f.default <= f.hi for f in policy.FIELDS.values())
    assert all(f.unlimited or f.default < float("inf") for f in policy.FIELDS.values())
    assert policy.make_policy().max_num_seqs == policy.FIELDS["max_num_seqs"].default
    # what other modules need of a knob comes from the table too
    assert policy.FLOORED == ("max_num_seqs", "max_num_batched_tokens")
    assert all(policy.FIELDS[k].unlimited for k in policy.CAPS)
    assert all(f.scale in ("log", "linear") for f in policy.FIELDS.values())
    assert all(f.lo >= 0 for f in policy.FIELDS.values() if f.scale == "log")
    assert all(f.off is None or f.lo <= f.off <= f.hi for f in policy.FIELDS.values())


def test_the_engine_keys_build_reads_are_the_ones_the_engine_config_lists():
    import yaml

    from servetune.config.scenario import ENGINE_KEYS

    conf = SRC.parents[1] / "conf" / "engine" / "vllm.yaml"
    listed = set(yaml.safe_load(conf.read_text())) - {"defaults"}
    assert listed == set(ENGINE_KEYS)
    read = set()
    for path in (SRC / "config").rglob("*.py"):
        read |= set(re.findall(r'"engine\.([a-z_]+)"', path.read_text()))
    assert read <= set(ENGINE_KEYS), sorted(read - set(ENGINE_KEYS))


def test_the_record_table_generates_the_outbox_and_the_results():
    import dataclasses

    from servetune.core.types import CascadeEntries, Entries, Outbox, RelaxTape, SwapTape
    from servetune.engine.outbox import RECORDS, empty_outbox, record_fields
    from servetune.run.driver import ScenarioResult

    type_of = {"cascade": CascadeEntries, "relaxed": RelaxTape, "swap": SwapTape}

    names = [f.name for f in RECORDS]
    always = [f.name for f in RECORDS if f.only is None]
    optional = [f.name for f in RECORDS if f.only is not None]
    assert [f.name for f in dataclasses.fields(Outbox)] == always + ["count"] + optional
    for f in RECORDS:  # each record field is a field of the entries or of its sub-state
        holder = Entries if f.only is None else type_of[f.only]
        assert f.name in {g.name for g in dataclasses.fields(holder)}, f.name
    results = [f.name for f in dataclasses.fields(ScenarioResult)]
    assert [f.name for f in RECORDS if f.result] == [
        n for n in results if n not in ("stats", "clock_s", "timeline")
    ]
    box = empty_outbox(3, 0, cascade=True)
    assert record_fields(box) == (*always, "tier")
    relaxed = empty_outbox(3, 0, relaxed=True, swap=True)
    assert record_fields(relaxed) == tuple(n for n in names if n != "tier")
    for f in RECORDS:
        value = getattr(relaxed if f.name in record_fields(relaxed) else box, f.name)
        shape = (3,) if f.width is None else (3, f.width)
        assert value.dtype == f.dtype and np.array_equal(
            value, np.full(shape, f.unset), equal_nan=True
        )


def test_the_wheel_lists_every_package_and_ships_conf_as_servetune_conf():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    root = SRC.parents[1]
    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        ".".join(("servetune",) + p.parent.relative_to(SRC).parts) for p in SRC.rglob("__init__.py")
    }
    on_disk |= {
        ".".join(("servetune", "conf") + p.parent.relative_to(root / "conf").parts)
        for p in (root / "conf").rglob("__init__.py")
    }
    assert sorted(tool["packages"]) == sorted(on_disk)
    assert tool["package-dir"] == {"": "src", "servetune.conf": "conf"}
    assert not (SRC / "conf").exists()  # one copy of the configs: conf/ at the top level
    assert (root / "conf" / "config.yaml").is_file()


@pytest.mark.slow
def test_the_built_wheel_holds_every_config_and_bundled_trace(tmp_path):
    import subprocess
    import sys
    import zipfile

    root = SRC.parents[1]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(root),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("servetune-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in (root / "conf").rglob("*.yaml"):
        assert f"servetune/conf/{path.relative_to(root / 'conf').as_posix()}" in names
    for path in (SRC / "workload" / "data").iterdir():
        if path.is_file():
            assert f"servetune/workload/data/{path.name}" in names


# The layers, lowest first: a module imports only from its own layer and the layers before it
# (modules of one tuple share a layer and do not import each other). README: How the code is
# laid out.
LAYERS = (
    ("core",),
    ("engine",),
    ("workload",),
    ("config",),
    ("run",),
    ("reporting",),
    ("deploy",),
    ("tuning", "validate"),
    ("cli",),
)
RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}


def _package(module: str) -> str | None:
    """The layer package of a dotted module name (servetune.<package>...), None for the
    package's own __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_is_in_a_layer():
    outside = [
        name
        for name in MODULES
        if name != "servetune"
        and _package(name) not in RANK
        and not name.startswith("servetune.conf")
    ]
    assert outside == []


def test_layers_import_only_the_layers_below_them():
    upward = []
    for name, path in MODULES.items():
        here = _package(name)
        if here is None or here not in RANK:
            continue
        for target, _, _, line in _imports(name, path):
            there = _package(target)  # None: the package root, above every layer
            if there == here:
                continue
            if there is None or there not in RANK or RANK[there] >= RANK[here]:
                upward.append(f"{name}:{line} imports {target}")
    assert upward == []


def test_no_issue_numbers_or_dates_in_the_package_text():
    """History lives in CHANGELOG.md and git log, not in module docstrings or comments: no
    "issue 41" and no dated "rerun 2026-12-02" in the package's source."""
    history = re.compile(
        r"\bissues? \d+\b|\b(?:rerun|measured|changed) (?:on )?20\d\d-\d\d-\d\d", re.I
    )
    found = [
        f"{path.relative_to(SRC)}:{n}"
        for path in SRC.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if history.search(line)
    ]
    assert found == []
