"""`servetune golden`: write golden fixtures from vLLM's own scheduler, or check servetune against
the committed ones.

    servetune golden [--out DIR] [--cases NAME,...]   # needs servetune[vllm]
    servetune golden --check [--out DIR]              # no vLLM needed; with it, also the drift
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from servetune.core.errors import ServetuneError
from servetune.validate import golden


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="servetune golden",
        description=(
            "Run the golden cases through vLLM's own V1 scheduler (the servetune[vllm] extra) and "
            "write one fixture per case, or with --check replay the fixtures through servetune's "
            "engine and list every difference; where vLLM is installed, --check also reruns each "
            "case through it and says which cases its version schedules differently from the "
            "fixture's, and from which iteration on."
        ),
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("tests/golden/fixtures"),
        help="fixture directory (default: tests/golden/fixtures)",
    )
    p.add_argument(
        "--cases",
        default=",".join(golden.CASES),
        help=f"comma-separated case names (default: all: {', '.join(golden.CASES)})",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="compare servetune with the fixtures in --out instead of writing them",
    )
    return p


def _write(names: list[str], out: Path) -> int:
    for name in names:
        start = time.perf_counter()
        fixture = golden.make_fixture(name)
        path = out / f"{name}.json.gz"
        golden.write_fixture(fixture, path)
        n_pre = sum(len(s["preempted"]) for s in fixture["steps"])
        print(
            f"{path}: {len(fixture['requests']['arrival'])} requests, "
            f"{len(fixture['steps'])} iterations, {n_pre} preemptions, vLLM "
            f"{fixture['vllm_version']} ({time.perf_counter() - start:.1f} s)"
        )
    return 0


def _vllm_installed() -> bool:
    """Whether vLLM imports here (the servetune[vllm] extra)."""
    try:
        golden.oracle.import_vllm()
    except ImportError:
        return False
    return True


def _check(names: list[str], out: Path) -> int:
    """servetune against each fixture; with vLLM installed, the installed vLLM against it too
    (the drift). Exit status 1 where servetune differs from a fixture of its own vLLM version."""
    failed = 0
    with_vllm = _vllm_installed()
    for name in names:
        path = out / f"{name}.json.gz"
        fixture = golden.load_fixture(path)
        diffs = golden.compare(fixture, golden.replay(fixture))
        note = golden.version_note(fixture)
        failed += bool(diffs) and note is None
        print(f"{name}: servetune " + ("identical" if not diffs else "DIFFERS"))
        if note is not None:
            print(f"  note: {path.name} {note}")
        for line in diffs:
            print(f"  {line}")
        if with_vllm:
            version, drift = golden.drift(fixture)
            same = "the same" if version == fixture["vllm_version"] else "another"
            verdict = "schedules it identically" if not drift else "CHANGES it"
            print(
                f"  vLLM {version} (installed; {same} version as the fixture's "
                f"{fixture['vllm_version']}) {verdict}"
            )
            for line in drift:
                print(f"    {line}")
    if not with_vllm:
        print("vLLM is not installed here: the drift of the installed vLLM is not checked")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    """Entry point of `servetune golden`; returns the exit status (2 on a user error)."""
    args = _parser().parse_args(argv)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in golden.CASES]
    try:
        if unknown:
            raise golden.GoldenError(
                f"--cases: unknown case(s) {unknown}; expected some of {sorted(golden.CASES)}"
            )
        return _check(names, args.out) if args.check else _write(names, args.out)
    except (ServetuneError, ImportError) as err:  # GoldenError, a fixture's bad config
        print(f"error: {err}", file=sys.stderr)
        return 2
