"""Command-line entry point: `servetune COMMAND [arguments]` (`servetune --help` lists them).

This module stays light: `servetune --help`, an unknown command and a bad output folder answer
from here; a command's module (servetune.cli.commands for the Hydra apps, each argparse command's
own) is imported only when that command runs."""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from pathlib import Path

from servetune.core.inputs import symlink_loop
from servetune.core.suggest import check_overrides

COMMANDS = {  # command -> what it does (servetune --help)
    "simulate": "simulate a serving engine on a trace; metrics, goodput, tokens per dollar",
    "tune": "search scheduler/admission settings for goodput per dollar; export them",
    "calibrate": "fit the step-time cost model to measured engine iterations",
    "report": "collect run folders into tables, figures and one HTML page",
    "export": "turn any run's or sweep point's policy into vLLM / SGLang arguments",
    "golden": "record vLLM's own scheduler as fixtures, or check servetune against them",
    "observe": "replay a trace on a real vLLM engine, or import a deployment's records",
    "validate": "calibrate on one observed run, predict another, report the errors",
}


HYDRA_APPS = {  # command -> "module:app" (a @hydra.main function)
    "simulate": "servetune.cli.hydra_apps:simulate_app",
    "tune": "servetune.cli.hydra_apps:tune_app",
    "calibrate": "servetune.cli.hydra_apps:calibrate_app",
}
ARGPARSE_APPS = {  # command -> "module:function" taking the arguments, returning the exit status
    "report": "servetune.cli.report:main",
    "golden": "servetune.cli.golden:main",
    "observe": "servetune.validate.observe:main",
    "validate": "servetune.validate.predict:main",
    "export": "servetune.cli.export:main",
}


def usage() -> str:
    """The top-level help: each command with what it does, and where to read more."""
    width = max(len(c) for c in COMMANDS)
    lines = ["usage: servetune COMMAND [arguments]", "", "commands:"]
    lines += [f"  {c:<{width}}  {what}" for c, what in COMMANDS.items()]
    lines += [
        "",
        "servetune COMMAND --help says what a command does and takes.",
        "example: servetune simulate workload=azure_conv policy.max_num_seqs=128",
    ]
    return "\n".join(lines)


OUTPUT_DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir")
YES = "--yes"  # simulate and tune: run even what the resource guard would refuse (guard.confirmed)


def _cannot_create_in(folder: Path) -> str | None:
    """Why no folder can be made in `folder` (an OSError's reason: read-only, no permission,
    a pseudo-filesystem such as /proc or /sys), or None; tried by making and removing a
    temporary folder there."""
    try:
        os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".servetune-probe-"))
    except OSError as err:
        return err.strerror or str(err)
    return None


def output_dir_problem(overrides: list[str]) -> str | None:
    """A message naming the key when an output folder override (hydra.run.dir,
    hydra.sweep.dir) lies under a file or in a folder where none can be created; None when it
    is usable (Hydra would otherwise fail creating it with a bare OSError traceback)."""
    for arg in overrides:
        key, _, value = arg.partition("=")
        value = value.strip("'\"")
        if key not in OUTPUT_DIR_KEYS or not value or "${" in value:
            continue
        try:
            path = Path(value).expanduser()
        except RuntimeError:
            return f"{key}: got {value!r}; cannot expand its ~user (no such user)"
        if symlink_loop(path) is not None:
            return (
                f"{key}: got {value!r}; it runs into a loop of symbolic links; expected "
                f"a folder to write in"
            )
        parent = path
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            return f"{key}: got {value!r}; {parent} is a file, expected a folder to write in"
        reason = _cannot_create_in(parent)
        if reason:
            return (
                f"{key}: got {value!r}; no folder can be created in {parent} ({reason}); "
                f"expected a writable folder"
            )
    return None


def with_yes(argv: list[str]) -> list[str]:
    """`argv` with `--yes` (run past the resource guard, servetune/run/guard.py) turned into
    its override, guard.confirmed=true, for Hydra to read."""
    if YES not in argv[1:]:
        return argv
    return [a for a in argv if a != YES] + ["guard.confirmed=true"]


def main() -> None:
    """Dispatch `servetune <command> [arguments]` to the command's Hydra or argparse app;
    `servetune`, `servetune --help` and `servetune help` print the commands and exit 0."""
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help", "help"):
        print(usage())
        sys.exit(0)
    if sys.argv[1] not in COMMANDS:
        print(f"servetune: unknown command {sys.argv[1]!r}\n\n{usage()}", file=sys.stderr)
        sys.exit(2)
    command = sys.argv.pop(1)
    if command in ("simulate", "tune"):
        sys.argv = with_yes(sys.argv)
    if command in ARGPARSE_APPS:
        module, name = ARGPARSE_APPS[command].split(":")
        sys.exit(getattr(importlib.import_module(module), name)(sys.argv[1:]))
    problem = output_dir_problem(sys.argv[1:])
    if (
        not problem
        and command in ("simulate", "tune")  # the apps of conf/config.yaml
        and not any(a in ("-h", "--help") for a in sys.argv[1:])
    ):
        problem = check_overrides(sys.argv[1:])
        if not problem:  # values and input files, before JAX and Hydra's app start
            from servetune.config.preflight import problem as preflight_problem

            problem = preflight_problem(sys.argv[1:])
    if problem:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True).print(
            f"[red]error:[/red] {escape(problem)}", highlight=False, soft_wrap=True
        )
        sys.exit(2)
    # Hydra apps: their --help is the command's own page (conf/hydra/help/COMMAND.yaml).
    # Appended, not inserted: argparse stops reading overrides at a flag such as -m that
    # follows the first positional argument.
    if not any(arg.startswith("hydra/help=") for arg in sys.argv[1:]):
        sys.argv.append(f"hydra/help={command}")
    module, name = HYDRA_APPS[command].split(":")
    getattr(importlib.import_module(module), name)()


if __name__ == "__main__":
    main()
