"""`make simulate` (`python -m scheduler_dedup.localrun.simulation`): run seeds, or replay one.

    --seeds N        run seeds 0..N-1 (from --first); ends with one line
                     "N seeds, M scheduled times, V violations"; exit 0 only if V is 0
    --seed S         replay seed S and print its history: the world, then each violating time
    --without CLASS  hold a fault class back (scenario.FEATURES), as many times as needed
    --store emulator run on the official Firestore emulator (started here) instead of memory

Exit codes: 0 no violation, 1 violations found, 2 bad arguments (one `error:` line).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from runledger.ledger.memory_store import MemoryRunStore
from scheduler_dedup.localrun.simulation.run import run_seed
from scheduler_dedup.localrun.simulation.scenario import FEATURES
from scheduler_dedup.localrun.simulation.trace import print_trace


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = _Parser(
        prog="python -m scheduler_dedup.localrun.simulation", description=__doc__.splitlines()[0]
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--seeds", type=int, metavar="N", help="run N seeds")
    which.add_argument("--seed", type=int, metavar="S", help="replay one seed as a trace")
    parser.add_argument("--first", type=int, default=0, metavar="S", help="first seed of --seeds")
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        choices=sorted(FEATURES),
        metavar="CLASS",
        help="hold a fault class back: " + ", ".join(sorted(FEATURES)),
    )
    parser.add_argument("--store", choices=("memory", "emulator"), default="memory")
    parser.add_argument("--workers", type=int, default=2, help="processes for --seeds (memory)")
    args = parser.parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    return args


@contextmanager
def _stores(kind: str) -> Iterator[Callable[[], Any]]:
    """A fresh store per seed: memory, or an emptied emulator database with the real store."""
    if kind == "memory":
        yield MemoryRunStore
        return
    from scheduler_dedup.localrun.emulator import start_emulator
    from scheduler_dedup.localrun.simulation.emulated import emulated_stores

    emulator = start_emulator()
    try:
        yield emulated_stores(emulator)
    finally:
        emulator.stop()


def _one(task: tuple[int, frozenset[str]]) -> tuple[int, int, list[str]]:
    seed, features = task
    result = run_seed(seed, features)
    return seed, len(result.expected), [violation.line() for violation in result.violations]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    features = frozenset(FEATURES) - set(args.without)
    with _stores(args.store) as store:
        if args.seed is not None:
            result = run_seed(args.seed, features, store)
            print_trace(result, sys.stdout)
            print(
                f"1 seeds, {len(result.expected)} scheduled times, "
                f"{len(result.violations)} violations"
            )
            return 1 if result.violations else 0
        seeds = [(seed, features) for seed in range(args.first, args.first + args.seeds)]
        if args.store == "memory" and args.workers > 1:
            with multiprocessing.get_context("fork").Pool(args.workers) as pool:
                results = list(pool.imap(_one, seeds, chunksize=4))
        else:
            results = [
                (seed, len(r.expected), [v.line() for v in r.violations])
                for seed, r in ((s, run_seed(s, f, store)) for s, f in seeds)
            ]
    times = violations = 0
    held = "".join(f" --without {name}" for name in sorted(args.without))
    for seed, count, lines in results:
        times += count
        violations += len(lines)
        if lines:
            print(f"seed {seed}: {len(lines)} violation(s), first: {lines[0]}")
            print(f'  replay: make simulate ARGS="--seed {seed}{held}"')
    print(f"{len(results)} seeds, {times} scheduled times, {violations} violations")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
