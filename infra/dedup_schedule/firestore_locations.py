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
