"""How fast the command line answers, side by side with the default simulation: `servetune --help`,
each command's `--help`, a typo'd key, and `import servetune`, each as a fresh process, against
`servetune simulate` on the embedded default (the README's first command). Processes are alternated
and each figure is the fastest of --repeats, so the shared machine's load hits every command alike;
ratios are what to compare across machines.

    python benchmarks/bench_cli.py              # 3 rounds
    python benchmarks/bench_cli.py --repeats 5
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

CLI = [sys.executable, "-m", "servetune.cli.main"]
COMMANDS = {
    "servetune --help": CLI + ["--help"],
    "servetune simulate --help": CLI + ["simulate", "--help"],
    "servetune tune --help": CLI + ["tune", "--help"],
    "servetune export --help": CLI + ["export", "--help"],
    "servetune report --help": CLI + ["report", "--help"],
    "servetune simulate policy.max_num_seq=64 (typo)": CLI + ["simulate", "policy.max_num_seq=64"],
    "python -c 'import servetune'": [sys.executable, "-c", "import servetune"],
    "python -c pass": [sys.executable, "-c", "pass"],
}
REFERENCE = "servetune simulate (the default run)"


def _seconds(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> None:
    """Print each command's fastest wall time and its ratio to the default simulation."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as out:
        runs = dict(
            COMMANDS,
            **{REFERENCE: CLI + ["simulate", "output.progress=false", f"hydra.run.dir={out}/run"]},
        )
        for _ in range(args.repeats):
            for name, cmd in runs.items():
                best[name] = min(best.get(name, float("inf")), _seconds(cmd))
    ref = best[REFERENCE]
    print(f"{'command':<52} {'seconds':>8} {'/ simulate':>10}")
    for name, seconds in best.items():
        print(f"{name:<52} {seconds:8.2f} {seconds / ref:10.3f}")


if __name__ == "__main__":
    main()
