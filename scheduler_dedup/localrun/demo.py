"""`make demo`: the stack's deduplicated schedule, running locally in one command.

Starts the official Firestore emulator and the real handler (functions-framework
on loopback), then lets a misbehaving Cloud Scheduler simulator deliver a
window of each job's scheduled runs in compressed time, and then delivers the
handler's audit job, which accounts for every scheduled time (and with
--catch-up finishes the runs Scheduler gave up on). One job runs with
`overlap: skip` (with the team's jobs, only one whose stack says so) and one of its
times is skipped while the run before it works;
one past time is backfilled as `python -m runledger.ops backfill` records it, and
the audit runs it (`scheduler_dedup.localrun.demo_overlap`). It prints a line per run,
a table per job, the audit's findings and the invariant, ends on one verdict
line, and exits 1 if the invariant does not hold, 2 on a usage error (a jobs.py that
cannot be imported among them, with the line `make plan` prints).

The work is the stack's own jobs from handler/jobs.py when that module defines
every job id of the stack, else (or with --demo-jobs) built-in demonstration
work; either way the simulator injects the same delays and failures around it.
A run the team's own job failed on every attempt is that job's failure, shown with
the exception the handler logged, never an exactly-once violation.
Everything it starts is stopped when it ends, also on Ctrl-C, unless --keep
leaves the emulator and the handler running for `make ops` (`scheduler_dedup.localrun.demo_keep`).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from runledger.facts import OUTCOME_OVERLAP_SKIPPED, OVERLAP_ALLOW, OVERLAP_SKIP
from runledger.schedules import VARIABLE as SCHEDULES_VARIABLE
from scheduler_dedup.localrun.demo_audit import (
    AuditOutcome,
    audit_outcome,
    deliver_audit,
    expected_findings,
    format_audit,
    late_runs,
    record_deploy_epochs,
    settled_by,
)
from scheduler_dedup.localrun.demo_clock import CLOCK_OFFSET_ENV, Clock, pinned_at, shifted_clock
from scheduler_dedup.localrun.demo_invariant import (
    FATE_RAN_ONCE,
    Invariant,
    RunVerdict,
    check_invariant,
)
from scheduler_dedup.localrun.demo_keep import (
    KeepError,
    KeptDemo,
    KeptProcess,
    curl_command,
    kept_message,
    refuse_if_running,
)
from scheduler_dedup.localrun.demo_overlap import (
    Backfill,
    Gate,
    Overlap,
    backfill_command,
    backfill_problems,
    choose_backfill,
    choose_overlap,
    overlap_problems,
    record_backfill,
    with_overlap,
)
from scheduler_dedup.localrun.demo_pause import (
    Pause,
    pause_midway,
    pause_problems,
    paused_schedules,
)
from scheduler_dedup.localrun.demo_plan import (
    WARMUP_JOB,
    ExecutionEvent,
    Step,
    WorkPlan,
    read_events,
    write_plan,
)
from scheduler_dedup.localrun.demo_report import (
    WAITED_OUTCOMES,
    format_invariant,
    format_job_logs,
    format_legend,
    format_misbehaviour,
    format_table,
    format_verdict,
    job_errors,
    job_stats,
    json_report,
    misbehaviour,
)
from scheduler_dedup.localrun.demo_stack import (
    DemoFiles,
    HandlerEnv,
    StackError,
    handler_dir,
    handler_env,
    load_stack,
    own_jobs,
    resolve_stack,
    sim_jobs,
    speedups,
)
from scheduler_dedup.localrun.simulator import (
    Delivery,
    Fault,
    PlanSettings,
    RunPlan,
    RunResult,
    Seen,
    SimJob,
    Transport,
    build_request,
    drive_run,
    plan_runs,
    replayed_since,
)

if TYPE_CHECKING:
    from dedup_schedule.config.model import ScheduleConfig
    from scheduler_dedup.localrun.emulator import FirestoreEmulator

# Scheduled runs are released one every PACE_S seconds, in schedule order.
PACE_S = 0.15
MAX_RUNS = 50
# After the Scheduler is done, executions still running (a lost race, a slow
# first attempt) get this long to end before the log is judged.
SETTLE_S = 15.0
# The handler's first delivery imports the Firestore client and connects.
WARMUP_TIMEOUT_S = 60.0


class DemoError(Exception):
    """The local setup did not work; the message is one line for the user."""


@dataclass(frozen=True)
class DemoOptions:
    stack: str | None = None  # None: the project's only stack file
    runs: int = 8
    seed: int = 7
    json_path: Path | None = None
    project_dir: Path | None = None
    without_dedup: bool = False
    catch_up: bool = False
    demo_jobs: bool = False  # the built-in demonstration work even where the stack's jobs exist
    keep: bool = (
        False  # leave the emulator and the handler running (scheduler_dedup.localrun.demo_keep)
    )
    verbose: bool = False  # list every handler setting the demo changes


def _parse(argv: Sequence[str] | None) -> DemoOptions:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_dedup.localrun.demo",
        description="Run the stack's deduplicated schedule locally against a misbehaving "
        "Cloud Scheduler simulator and check that every run's work happens exactly once. "
        "Through make: make demo ARGS='--runs 20 --seed 3'.",
    )
    parser.add_argument("--runs", type=int, default=8, help="scheduled runs per job (default 8)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the misbehaviour (default 7)")
    parser.add_argument(
        "--stack", default=None, help="stack name: Pulumi.<stack>.yaml (default: the only one)"
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="directory holding Pulumi.yaml (default: this repo)"
    )
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the report here")
    parser.add_argument(
        "--without-dedup",
        action="store_true",
        help="serve a handler with no run ledger instead, to watch the invariant fail",
    )
    parser.add_argument(
        "--catch-up",
        action="store_true",
        help="set catchUp on every job: the audit runs the missed and released runs itself",
    )
    parser.add_argument(
        "--demo-jobs",
        action="store_true",
        help="run the built-in demonstration work instead of the stack's jobs from handler/jobs.py",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the emulator and the handler running for make ops; make demo-stop ends them",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="list every handler setting the demo changes"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= MAX_RUNS:
        parser.error(f"--runs must be between 1 and {MAX_RUNS}")
    if args.catch_up and args.without_dedup:
        parser.error("--catch-up needs the ledger; it cannot go with --without-dedup")
    if args.keep and args.without_dedup:
        parser.error("--keep leaves the ledger running; it cannot go with --without-dedup")
    return DemoOptions(
        args.stack,
        args.runs,
        args.seed,
        args.json_path,
        project_dir=args.dir,
        without_dedup=args.without_dedup,
        catch_up=args.catch_up,
        demo_jobs=args.demo_jobs,
        keep=args.keep,
        verbose=args.verbose,
    )


class _Printer:
    """Progress lines from many run threads, one whole line at a time."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._lock = threading.Lock()

    def __call__(self, line: str = "") -> None:
        with self._lock:
            print(line, file=self.out, flush=True)


def _describe(d: Delivery) -> str:
    if d.seen is Seen.TIMEOUT:
        return "timeout"
    shown = str(d.status) + ("(waited)" if d.outcome in WAITED_OUTCOMES else "")
    if d.outcome == OUTCOME_OVERLAP_SKIPPED:
        shown += "(skipped)"
    return f"{shown}(ack lost)" if d.seen is Seen.LOST_ACK else shown


def progress_line(index: int, total: int, result: RunResult, verdict: RunVerdict) -> str:
    """One run, as the Scheduler saw it: each attempt's answer, burst copies in brackets.

    Ends with the run's work as `verdict` (`check_invariant` over the execution log)
    counts it and the fate the JSON report gives it, so print it only once the run's
    work has ended (`_RunLines`).
    """
    plan = result.plan
    successes = verdict.successes
    parts = []
    for attempt in range(result.retries + 1):
        ds = [d for d in result.deliveries if d.attempt == attempt]
        if not ds:
            continue
        text = _describe(ds[0])
        copies = [str(d.status) if d.status is not None else "timeout" for d in ds[1:]]
        if copies:
            text += f" +burst[{' '.join(copies)}]"
        parts.append(text)
    when = plan.schedule_time.strftime("%Y-%m-%d %H:%M")
    kind = "forced" if plan.manual else (str(plan.fault) if plan.fault else "-")
    if plan.fault is Fault.DROPPED:
        parts, end = ["(nothing sent)"], "never delivered"
    elif result.acknowledged and any(
        d.outcome == OUTCOME_OVERLAP_SKIPPED for d in result.deliveries
    ):
        end = "acknowledged, skipped (overlap: skip): deliberately not run"
    elif result.acknowledged:
        end = "acknowledged"
    elif verdict.job_failed:
        end = "your job raised on every attempt" + (", retries exhausted" * result.exhausted)
    elif not result.exhausted:
        end = "interrupted"
    else:
        # Only when the last retry's wait ran out before the running attempt ended.
        end = "retries exhausted" + (" before the running work ended" if successes else "")
    return (
        f"  [{index:>3}/{total}] {plan.job:<16} {when}Z {kind:<9} "
        f"{' -> '.join(parts)}  => {end}; work succeeded {successes}x ({verdict.fate})"
    )


class _RunLines:
    """The per-run lines, each printed once its run's work has ended.

    The Scheduler can give up on a run (its last attempt timed out, or it never
    sent it) while the handler still works on it, and the audit's catch-up may run
    it later: such a line waits for `flush`, which the demo calls with the same
    execution log its report is judged on, so every line says what the report says.
    """

    def __init__(self, say: _Printer, events_path: Path) -> None:
        self._say = say
        self._events_path = events_path
        self._lock = threading.Lock()
        self._printed = 0
        self.total = 0
        self._pending: list[RunResult] = []

    def done(self, result: RunResult) -> None:
        events = read_events(self._events_path)
        label = result.plan.label
        starts = sum(e.label == label and e.event == "start" for e in events)
        ended = sum(e.label == label and e.event == "end" for e in events)
        if result.acknowledged and starts == ended:
            self._print(result, events)
        else:
            with self._lock:
                self._pending.append(result)

    def flush(self, events: Sequence[ExecutionEvent]) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if pending:
            self._say("the runs the Scheduler gave up on or left to the audit, as they ended:")
        for result in pending:
            self._print(result, events)

    def _print(self, result: RunResult, events: Sequence[ExecutionEvent]) -> None:
        (verdict,) = check_invariant([result], events).verdicts
        with self._lock:
            self._printed += 1
            line = progress_line(self._printed, self.total, result, verdict)
        self._say(line)


def _overlap_line(overlap: Overlap | None, policies: Mapping[str, str]) -> str:
    """Which job shows an overlap skip, and whose policy that is: never set behind a team's back."""
    if overlap is None:
        return (
            'overlap: no run is skipped (no job that can show it has "overlap: skip" in the '
            "stack, and the demo changes no overlap policy of your jobs)"
        )
    shown = f"{overlap.skipped.label} is delivered while {overlap.holder.label} still works"
    if policies[overlap.job] == OVERLAP_SKIP:
        return f'overlap: {overlap.job} has "overlap: skip" in the stack; {shown}'
    return (
        f'overlap: {overlap.job} runs with "overlap: skip" for the built-in demonstration work '
        f"(the stack says {policies[overlap.job]}); {shown}"
    )


def _drive_all(
    plans: Sequence[RunPlan],
    jobs: dict[str, SimJob],
    transport: Transport,
    seed: int,
    stop: threading.Event,
    on_done: Callable[[RunResult], None],
    gate: Gate | None = None,
) -> list[RunResult]:
    """One thread per run, released PACE_S apart; returns when every run is over.

    A `gate` holds back the runs of the overlap's job until their turn.
    """
    results: list[RunResult | None] = [None] * len(plans)

    def drive(index: int, plan: RunPlan) -> None:
        rng = random.Random(f"{seed}/{plan.label}")  # per run, so thread timing cannot matter
        if gate is not None:
            gate.before(plan, stop)
        result = drive_run(plan, jobs[plan.job], transport, rng, time.monotonic, stop.wait, stop)
        results[index] = result
        if gate is not None:
            gate.after(plan)
        on_done(result)

    threads = []
    for index, plan in enumerate(plans):
        if stop.wait(PACE_S if index else 0):
            break
        thread = threading.Thread(target=drive, args=(index, plan), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)  # short joins keep Ctrl-C responsive
    return [r for r in results if r is not None]


def _warm_up(transport: Transport, job: SimJob, now: datetime, log_path: Path) -> None:
    """Send one no-op delivery first, so the handler's cold start is not timed as a run.

    On Cloud Run the first request of a new instance pays the same price; the
    demo keeps it out of the table, where it would look like a slow job.
    """
    when = (now - timedelta(hours=1)).replace(second=0, microsecond=0)
    plan = RunPlan(WARMUP_JOB, when, False, None, ())
    request = build_request(replace(job, id=WARMUP_JOB), plan, random.Random(0))
    answer = transport.send_all([request], WARMUP_TIMEOUT_S)[0]
    if answer.status != 200:
        raise DemoError(
            f"the handler's warm-up delivery got {answer.status or 'no answer'} "
            f"({answer.outcome}); see {log_path}"
        )


def _settle(events_path: Path, deadline_s: float) -> None:
    """Wait until no execution is still running (none must be left half-logged)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        events = read_events(events_path)
        starts = sum(e.event == "start" for e in events)
        if starts == len(events) - starts:
            return
        time.sleep(0.1)


def _print_setup(
    say: _Printer,
    options: DemoOptions,
    jobs: Sequence[SimJob],
    speedup: dict[str, float],
    notes: Sequence[str],
    runs: int,
    work: str,
    overlap: str | None,
) -> None:
    """What will be replayed, how time is compressed, and (--verbose) every setting changed."""
    say(
        f"stack {options.stack!r}, seed {options.seed}: the last {options.runs} scheduled runs "
        f"of each job before now, plus forced runs ({runs} runs)"
    )
    say(
        f"time is compressed per job; runs are released {PACE_S:.2f} s apart in schedule order, "
        "with the ScheduleTime the real Scheduler would send"
    )
    width = max(len(job.schedule) for job in jobs) + 2
    for job in jobs:
        say(
            f"  {job.id:<16} {job.schedule!r:<{width}} {job.time_zone:<17} "
            f"x{speedup[job.id]:<4.0f} deadline {job.attempt_deadline_s * speedup[job.id]:.0f}s"
            f" -> {job.attempt_deadline_s:.2f}s, {job.retry.retry_count} retries"
        )
    say(f"work: {work}")
    if overlap is not None:
        say(overlap)
    if not options.verbose:
        say(
            f"{len(notes)} handler settings differ from the deployed ones (time compressed); "
            "--verbose lists them"
        )
        return
    say("handler settings changed for the demo:")
    for note in notes:
        say(f"  {note}")


def _print_report(
    say: _Printer,
    results: Sequence[RunResult],
    invariant: Invariant,
    audit: str | None,
    errors: Mapping[str, str],
) -> None:
    say()
    say(format_table(job_stats(results, invariant)))
    say(format_legend())
    say()
    say(format_misbehaviour(misbehaviour(results, invariant)))
    if audit is not None:
        say(audit)
    say(format_invariant(invariant, audited=audit is not None, errors=errors))


def _run_audit(
    say: _Printer,
    transport: Transport,
    plans: Sequence[RunPlan],
    jobs: Sequence[SimJob],
    env: HandlerEnv,
    now: datetime,
    clock: Clock,
    files: DemoFiles,
    log_path: Path,
    results: Sequence[RunResult],
    catch_up: bool,
    drive: Callable[[Sequence[RunPlan]], list[RunResult]],
    pause: Pause | None,
    held: Sequence[RunPlan],
    overlap: Overlap | None = None,
    backfill: Backfill | None = None,
    emulator: FirestoreEmulator | None = None,
) -> tuple[AuditOutcome, list[RunResult]]:
    """Audit the ledger through the handler's reserved job, once every run has settled.

    Runs that came due while the demo ran are delivered first, as the Scheduler
    would; then the downstream outage ends (so a catch-up of an exhausted run
    can succeed), and the audit job is delivered. Returns the audit's outcome
    and the late runs' results. The paused job's runs are neither expected as
    findings nor delivered late; the audit must list it as paused. The backfill
    is recorded just before the audit, which runs it; the audit must count the skip.
    """
    expected = expected_findings(check_invariant(results, read_events(files.events)))
    if pause is not None:
        expected = {
            label: kind for label, kind in expected.items() if not label.startswith(f"{pause.job}@")
        }
    wait = (settled_by(plans, env.env) - clock()).total_seconds()
    if wait > 0:
        say(f"waiting {wait:.0f} s until the audit judges the latest replayed run ...")
        time.sleep(wait)
    late = [
        plan for plan in late_runs(jobs, now, clock()) if pause is None or plan.job != pause.job
    ]
    if late:
        say(f"{len(late)} run(s) came due while the demo ran; the Scheduler delivers them:")
    late_results = drive(late)
    files.outage_over.touch()
    recorded = None
    if backfill is not None and emulator is not None:
        say(f"an operator backfills one past time: {backfill_command(backfill)}")
        recorded = record_backfill(emulator, env.env, backfill, clock())
        say("\n".join(f"  {line}" for line in recorded[1].splitlines()))
    say(f"delivering the audit job{' (catch-up on)' if catch_up else ''} ...")
    answer = deliver_audit(transport, jobs[0], clock(), env.env)
    _settle(files.events, SETTLE_S)
    # After the audit: a catch-up that ran the team's job again may have failed it too.
    job_failed = check_invariant([*results, *late_results], read_events(files.events)).job_failed
    outcome = audit_outcome(answer, log_path, expected, catch_up, job_failed)
    extra: list[str] = []
    if overlap is not None:
        seen = check_invariant([*results, *late_results], read_events(files.events))
        extra += overlap_problems(overlap, seen, outcome.summary)
    if backfill is not None and recorded is not None:
        extra += backfill_problems(backfill, *recorded, outcome.summary)
    outcome = replace(outcome, problems=(*outcome.problems, *extra))
    if pause is not None:
        problems = pause_problems(
            pause, held, read_events(files.events), outcome.summary, outcome.findings
        )
        outcome = replace(outcome, problems=(*outcome.problems, *problems))
    return outcome, late_results


def _keep(
    emulator: FirestoreEmulator,
    handler: Any,
    workdir: Path,
    env: dict[str, str],
    jobs: Sequence[SimJob],
    results: Sequence[RunResult],
    invariant: Invariant,
) -> str:
    """Record the emulator and the handler as left running; returns how to use and stop them."""
    from scheduler_dedup.localrun import demo_keep

    state = KeptDemo(
        (
            KeptProcess("Firestore emulator", emulator.process.pid, str(emulator.log_path)),
            KeptProcess("handler", handler.process.pid, str(handler.log_path)),
        ),
        str(workdir),
        handler.url,
    )
    demo_keep.save(state, {**emulator.env(), **env})
    # A run whose work succeeded once: sent again by hand, it is answered without running
    # twice. (The run the demo dropped, or one that failed, would run for the first time.)
    ran_once = {v.label for v in invariant.verdicts if v.fate == FATE_RAN_ONCE}
    done = [r.plan for r in results if r.plan.label in ran_once and not r.plan.manual]
    curl = None
    if done:
        latest = max(done, key=lambda plan: plan.schedule_time)
        job = next(j for j in jobs if j.id == latest.job)
        stamp = latest.schedule_time.strftime("%Y-%m-%dT%H:%M:%SZ")
        curl = curl_command(handler.url, job.id, stamp, job.headers, job.body)
    return kept_message({**emulator.env(), **env}, curl)


def run_demo(
    options: DemoOptions,
    config: ScheduleConfig,
    out: TextIO,
    emulator: FirestoreEmulator | None = None,
    now: datetime | None = None,
) -> tuple[Invariant, dict[str, Any]]:
    """Run the whole demo; returns the invariant and the JSON report. Stops all it started.

    `now` pins the instant the demo starts at (tests: `scheduler_dedup.localrun.demo_clock`); the
    default is the real time, as `make demo` runs.
    """
    from scheduler_dedup.localrun.demo_http import HttpTransport
    from scheduler_dedup.localrun.emulator import start_emulator
    from scheduler_dedup.localrun.handler_server import start_handler

    project_dir = options.project_dir or Path.cwd()
    if options.demo_jobs or options.without_dedup:
        own = None
        work = "the built-in demonstration jobs" + (" (--demo-jobs)" if options.demo_jobs else "")
    else:
        found = own_jobs(config, project_dir)
        own, work = found.module, found.reason
    served = handler_dir(config, project_dir)
    say = _Printer(out)
    offset = pinned_at(now)
    clock = shifted_clock(offset)
    now = clock()
    speedup = speedups(config)
    jobs = sim_jobs(config, speedup)
    plans = plan_runs(jobs, now, PlanSettings(options.runs), random.Random(options.seed))
    # An operator pauses one job midway: Scheduler sends none of its later runs.
    pause = pause_midway(plans)
    held = [plan for plan in plans if pause is not None and pause.covers(plan)]
    plans = [plan for plan in plans if pause is None or not pause.covers(plan)]
    # One job skips a time while its run before works; one past time is backfilled.
    # The stack's overlap policies stand; only the built-in work may get a skip set.
    policies = {job.id: job.overlap for job in config.jobs}
    allowed = [job for job, policy in policies.items() if own is None or policy == OVERLAP_SKIP]
    overlap = backfill = None
    if not options.without_dedup:
        paused_job = None if pause is None else pause.job
        overlap = choose_overlap(plans, jobs, now, options.runs, paused_job, allowed)
        backfill = choose_backfill(plans, jobs, now, options.runs, paused_job)
    overlap_line = None if options.without_dedup else _overlap_line(overlap, policies)
    if overlap is not None:
        plans = with_overlap(plans, overlap, next(j for j in jobs if j.id == overlap.job))
    workdir = Path(tempfile.mkdtemp(prefix="dedup-demo-"))
    files = DemoFiles(
        workdir / "plan.json",
        workdir / "executions.log",
        workdir / "outage-over",
        None if overlap is None else workdir / "overlap-answered",
    )
    events_path = files.events
    write_plan(
        files.plan,
        WorkPlan(tuple(j.id for j in jobs), {p.label: p.script for p in plans}, Step(0.05)),
    )
    audit_since = replayed_since(jobs, now, options.runs)
    env = handler_env(
        config,
        speedup,
        plans,
        now,
        files,
        audit_since=audit_since,
        catch_up=options.catch_up,
        own_module=own,
        overlaps=None if overlap is None else {overlap.job: OVERLAP_SKIP},
    )
    if overlap is not None and policies[overlap.job] != OVERLAP_SKIP:
        env = replace(
            env,
            notes=(
                *env.notes,
                f'{overlap.job}: "overlap": "skip" in its DEDUP_SCHEDULES entry; its runs are '
                f"sent one after another, and {overlap.skipped.label} while "
                f"{overlap.holder.label} still works",
            ),
        )
    if pause is not None:
        env = replace(
            env,
            env={
                **env.env,
                SCHEDULES_VARIABLE: paused_schedules(env.env[SCHEDULES_VARIABLE], pause),
            },
            notes=(
                *env.notes,
                f"{pause.job} paused from {pause.since:%H:%M:%S}Z (its {len(held)} later run(s) "
                'never sent): its DEDUP_SCHEDULES entry says "paused": true',
            ),
        )
    # The stack "was deployed" before the oldest run the demo replays.
    deployed = min([plan.schedule_time for plan in plans if not plan.manual] + [audit_since])

    _print_setup(say, options, jobs, speedup, env.notes, len(plans), work, overlap_line)

    # A pinned demo serves the deployed entry point on the same shifted clock.
    clock_env = {CLOCK_OFFSET_ENV: repr(offset.total_seconds())} if offset else {}
    clocked: dict[str, Any] = {}
    if offset:
        clocked = {
            "source": Path(__file__).with_name("clocked_handler.py"),
            "extra_pythonpath": (served, project_dir),
        }
    started_emulator = None
    handler = None
    audit: AuditOutcome | None = None
    kept = False
    try:
        if options.without_dedup:
            say("starting a handler WITHOUT a run ledger (--without-dedup) ...")
            handler = start_handler(
                {**env.env, **clock_env},
                source=Path(__file__).with_name("demo_naive.py"),
                target="handle_without_ledger",
            )
        else:
            if emulator is None:
                say("starting the Firestore emulator ...")
                emulator = started_emulator = start_emulator(project=config.project)
            record_deploy_epochs(emulator, env.env, deployed)
            say("starting the handler (functions-framework) ...")
            handler = start_handler(
                {**emulator.env(), **env.env, **clock_env},
                **({"source": served / "main.py"} | clocked),
            )
        transport = HttpTransport(handler.url)
        _warm_up(transport, jobs[0], now, handler.log_path)
        say(f"handler on {handler.url}; delivering {len(plans)} runs:")
        stop = threading.Event()
        lines = _RunLines(say, events_path)

        serial = [job for job, policy in policies.items() if policy != OVERLAP_ALLOW]
        gate = None
        if overlap is not None or serial:
            gate = Gate(overlap, plans, events_path, files.overlap_answered, serial)

        def drive(batch: Sequence[RunPlan]) -> list[RunResult]:
            lines.total += len(batch)
            by_id = {j.id: j for j in jobs}
            return _drive_all(batch, by_id, transport, options.seed, stop, lines.done, gate)

        try:
            results = drive(plans)
            _settle(events_path, SETTLE_S)
            if not options.without_dedup:
                audit, late = _run_audit(
                    say,
                    transport,
                    plans,
                    jobs,
                    env,
                    now,
                    clock,
                    files,
                    handler.log_path,
                    results,
                    options.catch_up,
                    drive,
                    pause,
                    held,
                    overlap,
                    backfill,
                    emulator,
                )
                results += late
        finally:
            stop.set()
        backfilled = () if backfill is None else ((backfill.label, backfill.job),)
        events = read_events(events_path)
        lines.flush(events)
        invariant = check_invariant(results, events, backfilled)
        if audit is not None:
            invariant = replace(invariant, audit_problems=audit.problems)
        kept = options.keep and started_emulator is not None
    finally:
        if not kept:
            if handler is not None:
                handler.stop()
            if started_emulator is not None:
                started_emulator.stop()
                started_emulator.log_path.unlink(missing_ok=True)
            shutil.rmtree(workdir, ignore_errors=True)
    if kept and handler is not None and started_emulator is not None:
        # Saved before anything else can fail, so `make demo-stop` always finds them.
        keep_message = _keep(started_emulator, handler, workdir, env.env, jobs, results, invariant)
    handler_lines = handler.log().splitlines() if handler is not None else []
    job_logs = format_job_logs(handler_lines) if own else None
    errors = job_errors(handler_lines)
    if handler is not None and invariant.holds and not kept:
        handler.log_path.unlink(missing_ok=True)
    elif handler is not None:
        say(f"handler log{' kept' if not kept else ''}: {handler.log_path}")

    audited = None if audit is None else format_audit(audit, env.env, invariant.job_failed)
    _print_report(say, results, invariant, audited, errors)
    if job_logs is not None:
        say(job_logs)
    if kept:
        say()
        say(keep_message)
    settings = {
        "stack": options.stack,
        "seed": options.seed,
        "runs_per_job": options.runs,
        "catch_up": options.catch_up,
        "work": work,
        "started": now.isoformat(),
        "speedup": speedup,
        "handler_notes": list(env.notes),
    }
    report = json_report(settings, results, invariant, errors)
    if audit is not None:
        report["audit"] = audit.to_json()
    # Printed last, by `main`, after any other line.
    report["verdict"] = format_verdict(results, invariant, audit is not None)
    return invariant, report


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    from scheduler_dedup.localrun.emulator import EmulatorMissing

    # google.api_core warns at import that it will drop this Python in 2027: nothing
    # the demo's reader can act on, so only that warning is silenced (as for `make ops`).
    warnings.filterwarnings("ignore", "You are using a Python version", FutureWarning)
    options = _parse(argv)
    project_dir = options.project_dir or Path.cwd()
    try:
        options = replace(options, stack=resolve_stack(options.stack, project_dir))
        config = load_stack(options.stack, project_dir)
        if options.keep:
            refuse_if_running()
    except (StackError, KeepError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)  # a `kill` cleans up like Ctrl-C
    try:
        invariant, report = run_demo(options, config, out)
    except (EmulatorMissing, StackError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (DemoError, RuntimeError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"error: {first_line}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: emulator and handler stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    if options.json_path is not None:
        try:
            options.json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            print(f"error: cannot write {options.json_path}: {exc.strerror}", file=sys.stderr)
            return 2
        print(f"report written to {options.json_path}", file=out)
    print(report["verdict"], file=out)
    return 0 if invariant.holds else 1


if __name__ == "__main__":
    sys.exit(main())
