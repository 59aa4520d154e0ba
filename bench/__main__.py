"""`make bench` / `python -m bench`: run both sides, print the tables, optionally save JSON.

The tables are Markdown so a run's output can be pasted into the README as
is, together with the machine description and the command printed above it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Handler vs the guide's sample algorithm, side by side, on one emulator.",
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples: a smoke run")
    parser.add_argument("--reps", type=int, help="interleaved repetitions (default 5, quick 2)")
    parser.add_argument(
        "--coldstart",
        action="store_true",
        help="only the cold start: fresh processes of both sides, no served ones",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write raw samples here")
    parser.add_argument(
        "--rtt-ms",
        type=float,
        default=2.0,
        metavar="MS",
        help="modelled network round trip to Firestore for the extra latency rows "
        "(default 2, a conservative same-region figure; 0 leaves those rows out)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    # google.api_core warns about Python 3.11 at import; it says nothing about
    # the measurement, so it is silenced before the Google libraries load.
    warnings.filterwarnings("ignore", "You are using a Python version", FutureWarning)
    from bench.report import Report
    from bench.runner import BenchConfig, run_bench, run_coldstart

    config = BenchConfig.quick() if args.quick else BenchConfig()
    if args.reps is not None:
        if args.reps < 1:
            raise SystemExit("--reps must be at least 1")
        config = dataclasses.replace(config, reps=args.reps)
    if args.rtt_ms < 0:
        raise SystemExit("--rtt-ms must be 0 (off) or more")
    config = dataclasses.replace(config, rtt_ms=args.rtt_ms)
    command = "make bench" + (f" ARGS='{' '.join(sys.argv[1:])}'" if sys.argv[1:] else "")

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    run = run_coldstart if args.coldstart else run_bench
    started = time.perf_counter()
    samples = run(config, progress=progress)
    elapsed = time.perf_counter() - started
    report = Report(samples)
    tables = report.markdown()
    machine = samples.machine
    reps = len(samples.order)
    print(f"Command: `{command}` ({elapsed:.0f} s, {reps} interleaved repetitions)")
    print(
        f"Machine: {machine['cpus']} x {machine['cpu_model']}, Python {machine['python']}, "
        f"{machine['os']}, {machine['firestore_emulator']}, "
        f"google-cloud-firestore {machine['google-cloud-firestore']}, "
        f"functions-framework {machine['functions-framework']}"
    )
    order = ", ".join("->".join(sides) for sides in samples.order)
    print(f"Side order per repetition: {order}")
    print(
        "Cells: median [min-max] over repetitions; a ratio is that of the medians beside it,"
        " its [min-max] over the per-repetition pairs.\n"
    )
    print(tables)
    if args.json:
        payload = dataclasses.asdict(samples) | {"command": command, "elapsed_s": elapsed}
        payload["targets"] = [
            dataclasses.asdict(target) | {"verdict": target.verdict} for target in report.targets
        ]
        args.json.write_text(json.dumps(payload, indent=2, default=str))
        print(f"\nRaw samples: {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
