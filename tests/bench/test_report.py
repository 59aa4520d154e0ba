"""The bench report: verdicts and ratios a reader can check against the figures beside them."""

from __future__ import annotations

import re

from bench.report import MIN_SAMPLES, Report
from bench.runner import FIRST_STREAM, Samples


def _latency_samples(handler_ms: list[list[float]], baseline_ms: list[list[float]]) -> Samples:
    """One latency stream; each inner list is one repetition's deliveries."""
    samples = Samples(config={"rtt_ms": 0, "stream_requests": 3}, machine={})
    for h, b in zip(handler_ms, baseline_ms, strict=True):
        for side, values in (("handler", h), ("baseline", b)):
            samples.add(
                "latency",
                FIRST_STREAM,
                side,
                {"latencies_s": [v / 1000 for v in values], "non_2xx": 0},
            )
    return samples


def _target(report: Report, name: str):
    report.markdown()
    return next(t for t in report.targets if t.name == name)


def test_a_target_timed_on_too_few_repetitions_is_not_called_missed():
    report = Report(_latency_samples([[4, 4, 4]] * 2, [[5, 5, 5]] * 2))
    target = _target(report, f"p50 <= 1/2 baseline ({FIRST_STREAM})")
    assert target.verdict.startswith("too few samples")
    assert "MISSED" not in report.markdown()


def test_enough_repetitions_get_a_verdict():
    reps = MIN_SAMPLES
    missed = Report(_latency_samples([[4, 4, 4]] * reps, [[5, 5, 5]] * reps))
    assert _target(missed, f"p50 <= 1/2 baseline ({FIRST_STREAM})").verdict == "**MISSED**"
    met = Report(_latency_samples([[2, 2, 2]] * reps, [[5, 5, 5]] * reps))
    assert _target(met, f"p50 <= 1/2 baseline ({FIRST_STREAM})").verdict == "met"


def test_each_printed_ratio_is_that_of_the_medians_printed_beside_it():
    # Per-repetition ratios 0.2, 0.9, 0.5 (median 0.5); medians 4.0 and 10.0 (ratio 0.4).
    report = Report(_latency_samples([[2] * 3, [9] * 3, [4] * 3], [[10] * 3, [10] * 3, [8] * 3]))
    table = report.markdown()
    row = next(line for line in table.splitlines() if line.startswith(f"| {FIRST_STREAM}, p50"))
    handler, baseline, shown = (cell.strip() for cell in row.strip("|").split("|")[1:4])
    h, b = (float(re.match(r"[\d.]+", cell).group()) for cell in (handler, baseline))
    assert float(shown.split()[0]) == round(h / b, 2)
    assert shown.endswith("[0.20-0.90]")
