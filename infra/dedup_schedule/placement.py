"""Where `DedupSchedule`'s child components put their resources.

Each resource is named from the schedule's one prefix, waits for the APIs it calls,
and keeps the identity it had when it was a direct child of `DedupSchedule`.
A resource's URN encodes its parent chain, so moving it under a child component
changes its URN; without an alias Pulumi would delete the old resource and create
a new one (for the Firestore database: a new, empty ledger). `Alias(parent=...)`
names the previous parent, with name and type unchanged, so an existing stack
updates in place ("Refactoring with aliases": re-parenting a resource takes an
alias `{ parent: oldParent }`; pulumi SDK `Alias.parent` docstring: "The previous
parent of the resource").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pulumi


@dataclass(frozen=True)
class Placement:
    """Naming, ordering and previous parent shared by every child component's resources.

    prefix: the schedule's name prefix; every resource name is `<prefix>-<suffix>`.
    apis: the API enablements each resource waits for.
    moved_from: the `DedupSchedule` whose direct children these resources used to be.

    The alias is temporary. Pulumi's "Refactoring with aliases" (Removing aliases after
    migration): an alias is only load-bearing while a stack's state still holds the old
    URN; once every stack of the project has run `pulumi up` (or `pulumi refresh`) with
    the alias in place, the new URN is in state and the alias does nothing. Remove
    `moved_from` (and `Alias(parent=...)` in `opts`) once every stack deployed from a
    version before the split into child components has been updated by this program:
    `pulumi preview` on each shows these resources as `same`, and again without the
    alias shows no replacement. A stack first deployed after the split never needs it.
    """

    prefix: str
    apis: tuple[pulumi.Resource, ...]
    moved_from: pulumi.Resource
    # What a region's resources add to their names (`ScheduleConfig.region_suffix`):
    # nothing in the first region, so its resources keep their names and URNs.
    region_suffix: str = ""

    def name(self, suffix: str) -> str:
        """A resource's Pulumi name: unique in the stack, the region's suffix included."""
        return f"{self.prefix}-{suffix}{self.region_suffix}"

    def physical(self, suffix: str) -> str:
        """The cloud name of a resource each region holds one of (a function, its image
        repository): the same in every region, so logs and metrics filter one name."""
        return f"{self.prefix}-{suffix}"

    def in_region(self, region_suffix: str) -> Placement:
        """The placement of one region's resources."""
        return replace(self, region_suffix=region_suffix)

    def opts(
        self, parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource] = ()
    ) -> pulumi.ResourceOptions:
        """Options for one resource of the child component `parent`."""
        return pulumi.ResourceOptions(
            parent=parent,
            depends_on=[*self.apis, *depends_on],
            aliases=[pulumi.Alias(parent=self.moved_from)],
        )
