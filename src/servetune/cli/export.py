"""`servetune export DIR [--point KEY=VALUE ...] [--out OUT]`: the command line of
export_choice.py (what it exports, and how it chooses). This module stays light: `--help` and a
bad argument answer before pandas, JAX or the simulator load."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.markup import escape


def parser() -> argparse.ArgumentParser:
    """The command's arguments (DIR, --point, --out)."""
    p = argparse.ArgumentParser(
        prog="servetune export",
        description="Export the policy of a run, or of one point of a grid, sweep or tuning "
        "run, to vLLM and SGLang engine arguments and a policy= config file.",
    )
    p.add_argument("dir", help="a simulate run or multirun folder, or a tune run folder")
    p.add_argument(
        "--point",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keep the points whose KEY has VALUE (repeatable), e.g. "
        "policy.max_num_seqs=64 or workload.rate=5; of the settings left, the "
        "best by the tuner's order is exported",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output folder (default: DIR/export, or where that holds an export already, "
        "such as a tuning run's own, the first free DIR/export-2, export-3, ... beside it)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the export files an --out folder already holds (refused without it)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status (2 for a user error)."""
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    from servetune.core.errors import ConfigError, ServetuneError
    from servetune.deploy import export
    from servetune.deploy.choose import export_point

    console = Console(highlight=False, soft_wrap=True)
    try:
        chosen, paths = export_point(args.dir, args.point, args.out, force=args.force)
    except (ServetuneError, ConfigError) as err:
        Console(stderr=True).print(
            f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True
        )
        return 2
    for message in chosen.skipped:  # damaged run folders, as servetune report warns of them
        Console(stderr=True).print(
            f"[yellow]warning:[/yellow] left out {message}", highlight=False, soft_wrap=True
        )
    flags = json.loads(paths["vllm_args.json"].read_text())["flags"]
    folder = paths["tuned_policy.yaml"].parent
    console.print(f"exported {chosen.label} of {chosen.run_dir}: {chosen.why}", markup=False)
    console.print(f"vllm serve {flags}", markup=False)
    for warning in json.loads(paths["vllm_args.json"].read_text())["warnings"]:
        Console(stderr=True).print(
            f"[yellow]warning:[/yellow] {escape(warning)} (vllm_args.json)",
            highlight=False,
            soft_wrap=True,
        )
    names = ", ".join(sorted(p.name for p in paths.values()))
    console.print(f"{'kept' if chosen.kept else 'wrote'} {folder}/{names}", markup=False)
    if chosen.note:
        console.print(f"({chosen.note})", markup=False)
    console.print(
        export.config_group_hint(paths["tuned_policy.yaml"], "policy", "tuned_policy"), markup=False
    )
    return 0
