"""Entry point the Pulumi CLI runs for `--policy-pack policies`: serve the pack.

Constructing `PolicyPack` starts the analyzer's gRPC server and blocks, which
is why this file does nothing else and the rules live in `dedup_policies`.
"""

from pulumi_policy import PolicyPack

from dedup_policies import pack_arguments

PolicyPack(**pack_arguments())
