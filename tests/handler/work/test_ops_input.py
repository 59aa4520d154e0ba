"""Every operator input mistake of `python -m runledger.ops` is one `error:` line, no traceback.

Times and durations outside what a datetime holds (`0001-01-01T00:00:00+01:00` is
before year 1 in UTC), limits that select nothing, and DEDUP_* settings too large
for the ledger's date arithmetic are refused where they are read, with the exit
status docs/reference.md gives (2: a usage error, or an audit that could not run;
1: any other error).
"""

from __future__ import annotations

import json

import pytest

from tests.clitools import run_ops

SCHEDULE = {"id": "export", "schedule": "0 * * * *", "timeZone": "UTC", "retryWindowSeconds": 200}
SCOPE = {"DEDUP_ALLOWED_PROJECTS": "acme-prod", "DEDUP_ALLOWED_REGIONS": "europe-west1"}
WINDOW = ["--job", "export", "--from", "2026-10-16T06:00:00Z", "--to", "2026-10-16T07:00:00Z"]


def schedules(**entry: object) -> str:
    return json.dumps([SCHEDULE | entry])


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        (["backfill", "--job", "export", "--from", "0001-01-01T00:00:00+01:00",
          "--to", "2026-10-16T07:00:00Z", "--dry-run"], {}, 2,
         "error: argument --from: '0001-01-01T00:00:00+01:00' is out of range"),
        (["backfill", "--job", "export", "--from", "2026-10-16T06:00:00Z",
          "--to", "9999-12-31T23:59:59-01:00"], {}, 2,
         "error: argument --to: '9999-12-31T23:59:59-01:00' is out of range"),
        (["audit", "--since", "99999999999999999d"], {}, 2,
         "error: argument --since: '99999999999999999d' is longer than any look-back"),
        (["list", "--limit", "0"], {}, 2, "error: argument --limit: '0' is not a positive"),
        (["failed", "--limit", "-5"], {}, 2, "error: argument --limit: '-5' is not a positive"),
        (["audit"], {"DEDUP_RETENTION_SECONDS": "99999999999999999999"}, 2,
         "error: DEDUP_RETENTION_SECONDS: '99999999999999999999' is more than"),
        (["backfill", *WINDOW, "--dry-run"], {"DEDUP_LEASE_SECONDS": "9" * 30}, 1,
         "error: DEDUP_LEASE_SECONDS:"),
        (["describe", "--job", "export"], {"DEDUP_AUDIT_LOOKBACK_SECONDS": "9" * 25}, 1,
         "error: DEDUP_AUDIT_LOOKBACK_SECONDS:"),
        (["audit"], {"DEDUP_SCHEDULES": schedules(catchUp=True, catchUpMaxAgeSeconds=1e300)}, 2,
         "error: DEDUP_SCHEDULES[0] ('export'): catchUpMaxAgeSeconds 1e+300 must be at most"),
        (["backfill", *WINDOW], {"DEDUP_SCHEDULES": schedules(retryWindowSeconds=1e300)}, 1,
         "error: DEDUP_SCHEDULES[0] ('export'): retryWindowSeconds 1e+300 must be at most"),
    ],
)  # fmt: skip
def test_an_out_of_range_input_is_one_error_line(firestore_emulator, args, env, code, message):
    base = firestore_emulator.env() | SCOPE | {"DEDUP_SCHEDULES": schedules()}
    done = run_ops(*args, "--project", firestore_emulator.project, env=base | env)
    assert "Traceback" not in done.stderr
    assert (done.returncode, done.stdout) == (code, "")
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr
