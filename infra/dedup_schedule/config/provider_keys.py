"""`gcp:` keys the Google provider does not read, when one it does is close: a likely typo.

The provider ignores a key it does not know, so `gcp:regoin` would leave the region
unset for the provider without a word. Its keys are the ones its generated config
module reads (`pulumi_gcp/config/vars.py`: one `__config__.get...('<key>')` each),
taken from the installed package's source rather than kept by hand; the file is read,
not imported, so this stays free of Pulumi.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path

from dedup_schedule.config.values import did_you_mean

_READ = re.compile(r"__config__\.get\w*\('([A-Za-z0-9]+)'")


def provider_keys() -> frozenset[str]:
    """The config keys the installed pulumi_gcp reads (without the `gcp:` namespace)."""
    spec = importlib.util.find_spec("pulumi_gcp")
    if spec is None or spec.origin is None:
        return frozenset()
    source = (Path(spec.origin).parent / "config" / "vars.py").read_text(encoding="utf-8")
    return frozenset(_READ.findall(source))


def provider_key_warnings(keys: Iterable[str]) -> list[str]:
    """One line per `gcp:` key the provider does not read but that is close to one it does."""
    known = provider_keys()
    warnings = []
    for key in sorted(keys):
        namespace, _, name = key.partition(":")
        if namespace != "gcp" or not known or name in known:
            continue
        hint = did_you_mean(name, known)
        if hint:
            warnings.append(f"{key}: not a key of the gcp provider, which ignores it{hint}")
    return warnings
