"""The locations a Firestore database can be created in, for validating `database.location`.

Firestore does not run in every Google Cloud region, and a database's location can
never be changed after it is created, so a location outside this list is refused
before anything is deployed instead of failing the database's create in `pulumi up`.

Sources: Firestore "Locations" (multi-region locations `nam5`, `nam7` and `eur3`
of the standard edition, and the regional locations), matching the location ids the
Firestore API lists (REST reference, `projects.locations`). Google adds regions
over time: extend the tuple when the page lists a new one.
"""

from __future__ import annotations

MULTI_REGIONS = ("nam5", "nam7", "eur3")

REGIONS = (
    # North America
    "northamerica-northeast1",
    "northamerica-northeast2",
    "northamerica-south1",
    "us-central1",
    "us-east1",
    "us-east4",
    "us-east5",
    "us-south1",
    "us-west1",
    "us-west2",
    "us-west3",
    "us-west4",
    # South America
    "southamerica-east1",
    "southamerica-west1",
    # Europe
    "europe-central2",
    "europe-north1",
    "europe-north2",
    "europe-southwest1",
    "europe-west1",
    "europe-west2",
    "europe-west3",
    "europe-west4",
    "europe-west6",
    "europe-west8",
    "europe-west9",
    "europe-west10",
    "europe-west12",
    "europe-west15",
    # Middle East
    "me-central1",
    "me-central2",
    "me-west1",
    # Asia
    "asia-east1",
    "asia-east2",
    "asia-northeast1",
    "asia-northeast2",
    "asia-northeast3",
    "asia-south1",
    "asia-south2",
    "asia-southeast1",
    "asia-southeast2",
    "asia-southeast3",
    # Australia
    "australia-southeast1",
    "australia-southeast2",
    # Africa
    "africa-south1",
)

FIRESTORE_LOCATIONS = frozenset(MULTI_REGIONS + REGIONS)


def suggested_multi_region(region: str) -> str:
    """The multi-region location nearest a region: eur3 in Europe, nam5 elsewhere.

    eur3 spans europe-west1 and europe-west4; nam5 and nam7 span US regions
    (Firestore "Locations", multi-region locations).
    """
    return "eur3" if region.startswith("europe-") else "nam5"


def regional_database_problem(location: str, regions: tuple[str, ...]) -> str:
    """Why `location` cannot hold the ledger of a schedule run in `regions`; "" if it can.

    The ledger decides one run per time for every region: in one region, that
    region's outage stops the schedule in all of them, and a location cannot be
    changed once the database exists, so it is refused before anything is created.
    """
    if len(regions) < 2 or location in MULTI_REGIONS:
        return ""
    return (
        f"is one region, but the schedule runs in {len(regions)} ({', '.join(regions)}): "
        "its outage would stop every region's runs; use a multi-region location "
        f"({', '.join(MULTI_REGIONS)}), e.g. {suggested_multi_region(regions[0])} (a location "
        "cannot change after the database is created)"
    )
