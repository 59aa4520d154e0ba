"""CrossGuard rules for a deduplicated Cloud Scheduler schedule on Google Cloud.

Importing this package (or any module in it) only defines policies; the pack
itself is started by `policies/__main__.py`.
"""

from dedup_policies.pack import PACK_NAME, pack_arguments, policies

__all__ = ["PACK_NAME", "pack_arguments", "policies"]
