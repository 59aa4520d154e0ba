"""Turn raw samples into the published tables and the verdict on each target.

Every ratio is handler / baseline of the two medians printed beside it, so a
row reads consistently; the [min-max] after it ranges over the per-repetition
ratios of the pairs measured back to back, which shows how much of it is the
machine's noise. Lower is better for RPCs, times and bytes; higher for
throughput. A timed target judged on fewer than MIN_SAMPLES repetitions says
"too few samples" instead of met or missed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import audit_steady, dupwait, overlap, simulation
from bench.rpcs import DUP_COMPLETED, FIRST, SCENARIOS
from bench.runner import DUP_STREAM, FIRST_STREAM, Samples, rtt_variant
from bench.summary import Spread, percentile, ratio
from runledger.audit.expected import MAX_READS
from runledger.audit.runner import BATCH

Metric = Callable[[Any], float]
# A ratio this close to 1 whose spread straddles 1 is a tie on this machine,
# not a win or a loss: 2 shared cores do not resolve a 5 % difference.
TIE_RATIO = 1.05
# The fewest repetitions whose median can outvote one outlier.
MIN_SAMPLES = 3


@dataclass(frozen=True)
class Target:
    name: str
    measured: str
    met: bool
    tie: bool = False
    # Repetitions behind a timed target; None for exact counts (RPCs, executions).
    samples: int | None = None

    @property
    def verdict(self) -> str:
        if self.samples is not None and self.samples < MIN_SAMPLES:
            return f"too few samples ({self.samples} of {MIN_SAMPLES} repetitions)"
        if self.met:
            return "met"
        return "tie (within noise)" if self.tie else "**MISSED**"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}" if seconds < 10 else f"{seconds * 1000:.0f}"


def _fmt(spread: Spread, unit: Callable[[float], str]) -> str:
    if spread.low == spread.high:
        return unit(spread.median)
    return f"{unit(spread.median)} [{unit(spread.low)}-{unit(spread.high)}]"


def _num(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def _ratio(value: float) -> str:
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


def _vs(h: Spread, b: Spread, pairs: Spread) -> tuple[float, str]:
    """handler/baseline of the medians shown beside it, and its cell with the per-pair range."""
    value = ratio(h.median, b.median)
    if pairs.low == pairs.high:
        return value, _ratio(value)
    return value, f"{_ratio(value)} [{_ratio(pairs.low)}-{_ratio(pairs.high)}]"


def _executions(counts: list[int]) -> str:
    """Say "1 every rep" when exactly-once held throughout, else list each repetition's count."""
    if all(count == 1 for count in counts):
        return "1 every rep"
    return "per rep: " + ", ".join(str(count) for count in counts)


def _statuses(samples: list[dict[str, Any]]) -> str:
    total: Counter[str] = Counter()
    for sample in samples:
        total.update({str(code): count for code, count in sample["statuses"].items()})
    return " ".join(f"{code}:{total[code]}" for code in sorted(total))


class Report:
    def __init__(self, samples: Samples) -> None:
        self.samples = samples
        self.targets: list[Target] = []

    def side(self, metric: str, variant: str, side: str, pick: Metric) -> Spread:
        return Spread.of([pick(v) for v in self.samples.data[metric][variant][side]])

    def paired(self, metric: str, variant: str, pick: Metric) -> Spread:
        by_side = self.samples.data[metric][variant]
        pairs = zip(by_side["handler"], by_side["baseline"], strict=True)
        return Spread.of([ratio(pick(h), pick(b)) for h, b in pairs])

    def markdown(self) -> str:
        self.targets = []
        sections = [
            self._rpcs(),
            dupwait.section(self.samples.data.get("dupwait"), self._table),
            overlap.section(self.samples.data.get("overlap"), self._table),
            self._contention(),
            self._latency(),
            self._throughput(),
            self._coldstart(),
            self._ledger(),
            self._audit(),
            audit_steady.section(self.samples.data.get("audit_steady"), self._table, self._target),
            simulation.section(self.samples.data.get("simulation"), self._table),
            self._targets(),
        ]
        return "\n\n".join(section for section in sections if section)

    def _table(self, header: list[str], rows: list[list[str]]) -> str:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)

    def _rpcs(self) -> str:
        data = self.samples.data.get("rpcs")
        if not data:
            return ""
        rows = []
        for scenario in SCENARIOS:
            h = self.side("rpcs", scenario, "handler", lambda v: v["rpcs"])
            b = self.side("rpcs", scenario, "baseline", lambda v: v["rpcs"])
            last = {side: data[scenario][side][-1] for side in ("handler", "baseline")}
            rows.append(
                [
                    scenario,
                    _fmt(h, _num),
                    _fmt(b, _num),
                    _ratio(ratio(h.median, b.median)),
                    f"{last['handler']['reads']} / {last['handler']['writes']}",
                    f"{last['baseline']['reads']} / {last['baseline']['writes']}",
                    f"{last['handler']['status']} / {last['baseline']['status']}",
                ]
            )
            if scenario == FIRST:
                self._target("first delivery <= 2 RPCs", f"{_num(h.high)}", h.high <= 2)
            if scenario == DUP_COMPLETED:
                self._target("completed duplicate <= 2 RPCs", f"{_num(h.high)}", h.high <= 2)
        header = [
            "scenario",
            "handler RPCs",
            "baseline RPCs",
            "handler/baseline",
            "handler doc reads / writes",
            "baseline doc reads / writes",
            "status h / b",
        ]
        return "**Firestore RPCs per delivery** (exact, counted at the client)\n\n" + self._table(
            header, rows
        )

    def _contention(self) -> str:
        data = self.samples.data.get("contention")
        if not data:
            return ""
        rows = []
        for n in data:
            h = self.side("contention", n, "handler", lambda v: v["wall_s"])
            b = self.side("contention", n, "baseline", lambda v: v["wall_s"])
            r = self.paired("contention", n, lambda v: v["wall_s"])
            value, cell = _vs(h, b, r)
            runs = {side: [v["executions"] for v in data[n][side]] for side in data[n]}
            handler_once = all(count == 1 for count in runs["handler"])
            rows.append(
                [
                    n,
                    _fmt(h, _ms),
                    _fmt(b, _ms),
                    cell,
                    f"{1 / value:.0f}x",
                    _executions(runs["handler"]),
                    _executions(runs["baseline"]),
                    _statuses(data[n]["handler"]),
                    _statuses(data[n]["baseline"]),
                ]
            )
            if n == "8":
                self._target(
                    "contention N=8 >= 20x faster, one execution",
                    f"{1 / value:.0f}x ({_ms(h.median)} vs {_ms(b.median)} ms)",
                    1 / value >= 20 and handler_once,
                    samples=r.count,
                )
            if not handler_once:
                self._target(f"handler executes once at N={n}", str(runs["handler"]), False)
        header = [
            "N",
            "handler ms",
            "baseline ms",
            "handler/baseline",
            "speed-up",
            "handler executions",
            "baseline executions",
            "handler answers",
            "baseline answers",
        ]
        title = (
            "**Contention**: wall time until N identical deliveries of one run are all answered "
            "(executions per repetition from an independent witness; answers summed over "
            "repetitions)"
        )
        return title + "\n\n" + self._table(header, rows)

    def _rtt_pairs(self) -> list[tuple[str, str]]:
        """(loopback stream, the same stream through the modelled RTT), for each one measured."""
        rtt_ms = self.samples.config.get("rtt_ms", 0)
        if rtt_ms <= 0:
            return []
        data = self.samples.data.get("latency", {})
        pairs = [(name, rtt_variant(name, rtt_ms)) for name in (FIRST_STREAM, DUP_STREAM)]
        return [(plain, rtt) for plain, rtt in pairs if plain in data and rtt in data]

    def _rtt_added(self) -> str:
        """How much of the modelled RTT each side's p50 actually paid, in ms and in round trips.

        A check on the relay as much as on the sides: the handler's first
        delivery should pay about 2 round trips and the baseline's about 6,
        as the RPC table counts; far off that, the relay is not doing its job.
        """
        rtt_ms = self.samples.config.get("rtt_ms", 0)
        if not self._rtt_pairs():
            return ""
        link = Spread.of(self.samples.data["link"]["echo"]["p50"])
        link_p99 = Spread.of(self.samples.data["link"]["echo"]["p99"])
        lines = []
        for plain, rtt in self._rtt_pairs():
            by_side = self.samples.data["latency"]
            cells = []
            for side in ("handler", "baseline"):
                pairs = zip(by_side[rtt][side], by_side[plain][side], strict=True)
                added = Spread.of(
                    [
                        percentile(r["latencies_s"], 0.5) - percentile(p["latencies_s"], 0.5)
                        for r, p in pairs
                    ]
                )
                trips = added.median / link.median
                cells.append(f"{side} +{_fmt(added, _ms)} ms (~{trips:.1f} round trips)")
            lines.append(f"- {plain}: " + ", ".join(cells))
        title = (
            f"\n\nModelled RTT {rtt_ms:g} ms: one round trip through the relay (100-byte echo) "
            f"measures p50 {_fmt(link, _ms)} ms, p99 {_fmt(link_p99, _ms)} ms. Added to each "
            "side's p50 against the same repetition's loopback stream, in ms and in those "
            "measured round trips:\n"
        )
        return title + "\n".join(lines)

    def _latency(self) -> str:
        data = self.samples.data.get("latency")
        if not data:
            return ""
        with_targets = {FIRST_STREAM, DUP_STREAM} | {rtt for _, rtt in self._rtt_pairs()}
        rows = []
        for variant in data:
            for label, share in (("p50", 0.5), ("p99", 0.99)):

                def pick(v: dict[str, Any], share: float = share) -> float:
                    return percentile(v["latencies_s"], share)

                h = self.side("latency", variant, "handler", pick)
                b = self.side("latency", variant, "baseline", pick)
                r = self.paired("latency", variant, pick)
                value, cell = _vs(h, b, r)
                rows.append([f"{variant}, {label}", _fmt(h, _ms), _fmt(b, _ms), cell])
                if label == "p50" and variant in with_targets:
                    self._target(
                        f"p50 <= 1/2 baseline ({variant})",
                        f"{cell} ({_ms(h.median)} vs {_ms(b.median)} ms)",
                        value <= 0.5,
                        samples=r.count,
                    )
        bad = sum(v["non_2xx"] for by in data.values() for vs in by.values() for v in vs)
        note = f"\n\nNon-2xx answers in the streams: {bad}." if bad else ""
        count = self.samples.config["stream_requests"]
        title = f"**End-to-end latency** through the HTTP server, {count} sequential deliveries"
        if self._rtt_pairs():
            title += (
                " (RTT rows: a separate pair of servers reaching the same emulator through a "
                "relay that delays each direction by half the RTT)"
            )
        header = ["stream", "handler ms", "baseline ms", "handler/baseline"]
        return title + "\n\n" + self._table(header, rows) + note + self._rtt_added()

    def _throughput(self) -> str:
        data = self.samples.data.get("throughput")
        if not data:
            return ""
        rows = []
        for clients in data:
            h = self.side("throughput", clients, "handler", float)
            b = self.side("throughput", clients, "baseline", float)
            r = self.paired("throughput", clients, float)
            rows.append([clients, _fmt(h, _num), _fmt(b, _num), _vs(h, b, r)[1]])
        header = ["concurrent clients", "handler req/s", "baseline req/s", "handler/baseline"]
        return "**Throughput** of first deliveries (higher is better)\n\n" + self._table(
            header, rows
        )

    def _coldstart(self) -> str:
        data = self.samples.data.get("coldstart")
        if not data:
            return ""
        rows = []
        labels = {
            "import_s": "import entry point",
            "first_answer_s": "import + first answer",
            "process_s": "whole process (spawn to exit)",
            "cpu_s": "import + first answer, process CPU time",
        }
        for key, label in labels.items():
            h = self.side("coldstart", "fresh process", "handler", lambda v, k=key: v[k])
            b = self.side("coldstart", "fresh process", "baseline", lambda v, k=key: v[k])
            r = self.paired("coldstart", "fresh process", lambda v, k=key: v[k])
            value, cell = _vs(h, b, r)
            rows.append([label, _fmt(h, _ms), _fmt(b, _ms), cell])
            if key == "first_answer_s":
                self._target(
                    "cold start no slower than baseline",
                    f"{cell} ({_ms(h.median)} vs {_ms(b.median)} ms)",
                    value <= 1.0,
                    tie=r.low <= 1.0 <= r.high and value <= TIE_RATIO,
                    samples=r.count,
                )
        best = {
            side: min(v["first_answer_s"] for v in data["fresh process"][side])
            for side in ("handler", "baseline")
        }
        rows.append(
            [
                "import + first answer, best of all samples",
                _ms(best["handler"]),
                _ms(best["baseline"]),
                _ratio(ratio(best["handler"], best["baseline"])),
            ]
        )
        header = ["cold start", "handler ms", "baseline ms", "handler/baseline"]
        return "**Cold start** in a fresh interpreter\n\n" + self._table(header, rows)

    def _ledger(self) -> str:
        data = self.samples.data.get("ledger")
        if not data:
            return ""
        rows = []
        for by_side in data.values():
            h, b = by_side["handler"][-1], by_side["baseline"][-1]
            runs = h["jobs"] * h["runs_per_job"]
            rows.append(
                [
                    f"{h['jobs']} jobs x {h['runs_per_job']} runs",
                    f"{h['documents']} / {b['documents']}",
                    f"{h['documents'] / runs:.2f} / {b['documents'] / runs:.2f}",
                    f"{h['total_bytes']} / {b['total_bytes']}",
                    f"{h['total_bytes'] / runs:.0f} / {b['total_bytes'] / runs:.0f}",
                    f"{h['fields_per_document']} / {b['fields_per_document']}",
                ]
            )
        header = [
            "ledger after",
            "documents h / b",
            "docs per run h / b",
            "bytes h / b",
            "bytes per run h / b",
            "indexed fields per doc h / b",
        ]
        title = "**Ledger size**: one document per run on both sides, bytes by Firestore's rules"
        return title + "\n\n" + self._table(header, rows)

    def _audit(self) -> str:
        data = self.samples.data.get("audit")
        if not data:
            return ""
        rows = []
        for label, by_side in data.items():
            costs = by_side["handler"]
            last = costs[-1]
            wall = Spread.of([cost["wall_s"] for cost in costs])
            reads = f"refused: over {MAX_READS:,}" if last["refused"] else f"{last['reads']:,}"
            rows.append(
                [
                    label,
                    f"{last['expected_runs']:,}",
                    f"{last['checked']:,}",
                    reads,
                    str(last["rpcs"]),
                    _fmt(wall, _ms),
                    str(last["findings"]),
                ]
            )
        header = [
            "audit of",
            "schedule times",
            "settled (judged)",
            "document reads",
            "BatchGet RPCs",
            "wall ms",
            "findings",
        ]
        title = (
            "**Audit cost**: one full-window audit, as `ops audit --since` runs it, in-process "
            "on a counted client; "
            f"one read per job's epoch and per settled schedule time, {BATCH} keys per "
            "BatchGetDocuments, at most "
            f"{MAX_READS:,} reads (a larger audit is refused before reading); the ledger holds a "
            "completed record for every run but every 50th, which is reported missed"
        )
        return title + "\n\n" + self._table(header, rows)

    def _target(
        self, name: str, measured: str, met: bool, tie: bool = False, samples: int | None = None
    ) -> None:
        self.targets.append(Target(name, measured, met, tie, samples))

    def _targets(self) -> str:
        if not self.targets:
            return ""
        rows = [[t.name, t.measured, t.verdict] for t in self.targets]
        return "**Targets**\n\n" + self._table(["target", "measured", "verdict"], rows)
