"""Policy config with defaults, read the same way under the engine and in direct calls.

The engine fills schema defaults in before it configures the pack, but a
policy can also be called with no config at all (older CLIs, direct tests),
so every rule reads its settings through `setting` with the same default
that its schema advertises.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import PolicyConfigSchema, ResourceValidationArgs, StackValidationArgs


def setting(args: ResourceValidationArgs | StackValidationArgs, key: str, default: Any) -> Any:
    """The configured value for `key`, or `default` when the engine sent none."""
    config = args.get_config() or {}
    return config.get(key, default)


def schema(**properties: dict[str, Any]) -> PolicyConfigSchema:
    """A config schema from keyword arguments; each property carries its default."""
    return PolicyConfigSchema(properties=dict(properties))
