"""`servetune golden`: write golden fixtures from vLLM's own scheduler, or check servetune against
the committed ones.

    servetune golden [--out DIR] [--cases NAME,...]   # needs servetune[vllm]
    servetune golden --check [--out DIR]              # no vLLM needed
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
            "engine and list every difference."
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


def _check(names: list[str], out: Path) -> int:
    failed = 0
    for name in names:
        path = out / f"{name}.json.gz"
        fixture = golden.load_fixture(path)
        diffs = golden.compare(fixture, golden.replay(fixture))
        failed += bool(diffs)
        print(f"{name}: " + ("identical" if not diffs else "DIFFERS"))
        for line in diffs:
            print(f"  {line}")
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
