"""`RunLedger`: the Firestore database, its TTL policies, and the runtime account's access.

The runtime account gets only document get/create/update (`runledger.facts.
LEDGER_PERMISSIONS`), in the one ledger database.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from dedup_schedule.config.model import DatabaseConfig
from dedup_schedule.custom_roles import custom_role
from dedup_schedule.placement import Placement
from runledger import facts


@dataclass(frozen=True)
class RunLedgerArgs:
    """Inputs of `RunLedger`.

    collection: the ledger collection (run documents), validated by the config.
    database: the database to create, or to reuse when `database.create` is false.
    runtime_member: IAM member of the account the handler runs as.
    """

    placement: Placement
    project: str
    collection: str
    database: DatabaseConfig
    runtime_member: pulumi.Input[str]


class RunLedger(pulumi.ComponentResource):
    """The run ledger's database and TTL policies, and the handler's access to it."""

    database_name: pulumi.Output[str]
    access_grant: gcp.projects.IAMMember

    def __init__(
        self, name: str, args: RunLedgerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("scheduler-dedup:index:RunLedger", name, None, opts)
        dependencies: list[pulumi.Resource] = []
        database_name: pulumi.Output[str] = pulumi.Output.from_input(args.database.name)
        if args.database.create:
            database = _database(self, args)
            dependencies.append(database)
            database_name = database.name
        ledger_ttl = _ttl_policy(
            self, args, "ledger-ttl", args.collection, database_name, dependencies
        )
        # Checkpoints and outputs live in the `runledger_work` subcollection of each run
        # document and carry a copy of the run's `expire_at`, so the same policy on that
        # collection group makes them expire with their run. Field operations on one
        # database are serialised by Firestore: two created at once can fail with 409
        # "Please retry, underlying data changed" (terraform-provider-google#16329; the
        # provider retries since magic-modules#9329), so the second waits for the first.
        _ttl_policy(
            self,
            args,
            "work-ttl",
            facts.WORK_COLLECTION,
            database_name,
            [*dependencies, ledger_ttl],
        )
        self.database_name = database_name
        self.access_grant = _grant_access(self, args, database_name)
        self.register_outputs({"databaseName": database_name})


def _database(parent: RunLedger, args: RunLedgerArgs) -> gcp.firestore.Database:
    db = args.database
    return gcp.firestore.Database(
        args.placement.name("ledger-db"),
        gcp.firestore.DatabaseArgs(
            project=args.project,
            name=db.name,
            location_id=db.location,
            type="FIRESTORE_NATIVE",
            delete_protection_state=(
                "DELETE_PROTECTION_ENABLED"
                if db.deletion_protection
                else "DELETE_PROTECTION_DISABLED"
            ),
            point_in_time_recovery_enablement=(
                "POINT_IN_TIME_RECOVERY_ENABLED"
                if db.point_in_time_recovery
                else "POINT_IN_TIME_RECOVERY_DISABLED"
            ),
            # `pulumi destroy` forgets the database instead of deleting it: the
            # ledger may be shared with other stacks and a named database id
            # cannot be reused for a while after deletion.
            deletion_policy="ABANDON",
        ),
        opts=args.placement.opts(parent),
    )


def _ttl_policy(
    parent: RunLedger,
    args: RunLedgerArgs,
    suffix: str,
    collection: str,
    database_name: pulumi.Output[str],
    dependencies: list[pulumi.Resource],
) -> gcp.firestore.Field:
    """A TTL policy on `expire_at` for one collection group, with the field unindexed."""
    return gcp.firestore.Field(
        args.placement.name(suffix),
        gcp.firestore.FieldArgs(
            project=args.project,
            database=database_name,
            collection=collection,
            field=facts.TTL_FIELD,
            # Documents expire at their own `expire_at` timestamp (no offset).
            ttl_config=gcp.firestore.FieldTtlConfigArgs(),
            # An empty index config drops the single-field indexes on `expire_at`:
            # nothing queries it and indexing a monotonically increasing timestamp
            # creates write hotspots.
            index_config=gcp.firestore.FieldIndexConfigArgs(indexes=[]),
            # `pulumi destroy` keeps the database (see `_database`), so it keeps the TTL
            # policies too: deleting them would switch expiry off on the kept documents.
            # ABANDON forgets the field instead of deleting it (pulumi-gcp FieldArgs
            # `deletion_policy`). The Firestore Admin API has no create for fields, only
            # `patch` (REST reference, projects.databases.collectionGroups.fields), so a
            # later `pulumi up` sets the same policy again over the kept one.
            deletion_policy="ABANDON",
        ),
        opts=args.placement.opts(parent, dependencies),
    )


def _grant_access(
    parent: RunLedger, args: RunLedgerArgs, database_name: pulumi.Output[str]
) -> gcp.projects.IAMMember:
    """Document read/write for the runtime account, in the ledger database only.

    Firestore has no IAM policy on a database (or collection) resource: roles are
    granted on the project. Firestore does evaluate IAM Conditions on
    `resource.name` of the database, so a project-level grant conditioned on
    `projects/P/databases/D` is the narrowest binding available. The role is a
    custom role holding only the three document permissions the handler uses,
    since every predefined Firestore role also grants listing and more.
    """
    project, place = args.project, args.placement
    role = custom_role(
        place,
        parent,
        "ledger-role",
        project,
        "ledger_rw",
        "run ledger read/write",
        "Get, create and update documents; nothing else.",
        facts.LEDGER_PERMISSIONS,
    )
    return gcp.projects.IAMMember(
        place.name("runtime-ledger-access"),
        gcp.projects.IAMMemberArgs(
            project=project,
            role=role.name,
            member=args.runtime_member,
            condition=gcp.projects.IAMMemberConditionArgs(
                title=f"{place.prefix} ledger database only",
                description="Limits the grant to the run ledger's Firestore database.",
                expression=database_name.apply(
                    lambda name: f'resource.name == "projects/{project}/databases/{name}"'
                ),
            ),
        ),
        opts=place.opts(parent),
    )
