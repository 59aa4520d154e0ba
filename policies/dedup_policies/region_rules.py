"""A schedule run from several regions keeps its ledger in a multi-region Firestore location.

Each region's Scheduler delivers every run to its own region's handler, and all of
them decide one run per time in one ledger database. In a regional location that
region's outage stops the runs of every region, which is what the second region
was for; and a database's location cannot change once it is created, so the pack
refuses it before `pulumi up` creates it. The regions are read from the dedup
handlers themselves: their locations, and DEDUP_REGIONS, which every region's
handler of such a stack carries.
"""

from __future__ import annotations

from collections.abc import Sequence

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from dedup_policies import stack_view, types
from dedup_policies.facts import DEFAULT_DATABASE
from dedup_policies.props import as_text, get_path
from dedup_policies.unknowns import Deferred

# Firestore "Locations", multi-region locations (standard edition).
MULTI_REGION_LOCATIONS = ("nam5", "nam7", "eur3")


def regional_copies(handlers: Sequence[stack_view.Handler]) -> bool:
    """Whether `handlers` are one schedule's handler, one per region of it.

    Such copies share one runtime account by design (one ledger grant for one
    schedule): each names the same key region, regions, database and collection,
    and runs in a different one of those regions.
    """
    scopes = set()
    locations = []
    for handler in handlers:
        settings = handler.settings()
        location = as_text(get_path(handler.resource.props, "location"))
        if not settings.key_region or location not in settings.regions:
            return False
        scopes.add((settings.key_region, settings.regions, settings.database, settings.collection))
        locations.append(location)
    return len(scopes) == 1 and len(set(locations)) == len(locations)


def _regions_by_database(view: stack_view.StackView) -> dict[str, set[str]]:
    """Each ledger database's regions: where its dedup handlers run, and their DEDUP_REGIONS."""
    regions: dict[str, set[str]] = {}
    for handler in view.dedup_handlers():
        settings = handler.settings()
        found = regions.setdefault(settings.database, set())
        location = as_text(get_path(handler.resource.props, "location"))
        if location:
            found.add(location)
        found.update(settings.regions)
    return regions


def _check(args: StackValidationArgs, report: ReportViolation) -> None:
    regions = _regions_by_database(stack_view.build(args.resources))
    with Deferred() as later:
        for resource in args.resources:
            if resource.resource_type != types.FIRESTORE_DATABASE:
                continue

            def check(resource=resource) -> None:
                name = as_text(get_path(resource.props, "name")) or DEFAULT_DATABASE
                served = sorted(regions.get(name, ()))
                location = as_text(get_path(resource.props, "locationId"))
                if len(served) < 2 or not location or location in MULTI_REGION_LOCATIONS:
                    return
                report(
                    f"Firestore database {name!r} holds the ledger of a schedule run in "
                    f"{len(served)} regions ({', '.join(served)}) but is in the one region "
                    f"{location!r}: its outage would stop every region's runs. Create it in a "
                    f"multi-region location ({', '.join(MULTI_REGION_LOCATIONS)}); a "
                    "location cannot change after the database is created.",
                    resource.urn,
                )

            later.run(check)


ledger_multi_region = StackValidationPolicy(
    name="ledger-multi-region",
    description="A schedule run from several regions keeps its ledger in a multi-region "
    "Firestore location (nam5, nam7, eur3).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_check,
)


def _job_ids(view: stack_view.StackView, handler: stack_view.Handler) -> set[str]:
    """The Scheduler job ids that call `handler` (X-CloudScheduler-JobName is the id)."""
    return {
        name
        for job in view.jobs_calling(handler)
        if (name := as_text(get_path(job.resource.props, "name")))
    }


def _check_key_region(args: StackValidationArgs, report: ReportViolation) -> None:
    view = stack_view.build(args.resources)
    with Deferred() as later:
        handlers = view.dedup_handlers()
        for index, first in enumerate(handlers):
            for second in handlers[index + 1 :]:
                later.run(_check_pair, view, first, second, report)


def _check_pair(
    view: stack_view.StackView,
    first: stack_view.Handler,
    second: stack_view.Handler,
    report: ReportViolation,
) -> None:
    """Two regions' handlers of one ledger that serve one job id must key it alike."""
    a, b = first.settings(), second.settings()
    a.require("DEDUP_DATABASE", "DEDUP_COLLECTION", "DEDUP_KEY_REGION")
    b.require("DEDUP_DATABASE", "DEDUP_COLLECTION", "DEDUP_KEY_REGION")
    where = [as_text(get_path(h.resource.props, "location")) for h in (first, second)]
    if (a.database, a.collection) != (b.database, b.collection) or where[0] == where[1]:
        return
    shared = sorted(_job_ids(view, first) & _job_ids(view, second))
    if not shared or (a.key_region and a.key_region == b.key_region):
        return
    report(
        f"{first.label} ({where[0]}) and {second.label} ({where[1]}) both run job(s) "
        f"{', '.join(shared)} in ledger {a.collection!r} of database {a.database!r}, but "
        "their run keys hash their own regions (DEDUP_KEY_REGION unset or not the same): "
        "each region would run every time once more. Give both the same DEDUP_KEY_REGION "
        "(the stack's `regions` key does) or their jobs distinct ids.",
        second.resource.urn,
    )


ledger_one_key_region = StackValidationPolicy(
    name="ledger-one-key-region",
    description="Handlers in different regions that run the same job on one ledger key its "
    "runs by one region (DEDUP_KEY_REGION), so each time runs once.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_check_key_region,
)

POLICIES = [ledger_multi_region, ledger_one_key_region]
