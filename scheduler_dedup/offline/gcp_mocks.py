"""Pulumi mocks that answer the way Google Cloud would, for the types they know.

`GcpMocks` fills the computed outputs Google Cloud returns for the types in
`_COMPUTED` (service account emails, Cloud Run URLs, Cloud SQL connection names,
...) and answers a few data sources (project, default service accounts, client
config, zones). Every other computed output stays unknown, as in `pulumi
preview`. Values derived from names are stable, so two runs of one program agree.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pulumi.runtime.mocks import MockCallArgs, MockResourceArgs, Mocks


def mock_project_number(project: str) -> str:
    """A stable 12-digit stand-in for the project number Google would return."""
    return str(
        100_000_000_000 + int(hashlib.sha256(project.encode()).hexdigest(), 16) % (9 * 10**11)
    )


def _text(inputs: Mapping[str, Any], key: str) -> str | None:
    """A known string input (unknown and secret inputs are not usable to compute from)."""
    value = inputs.get(key)
    return value if isinstance(value, str) and value else None


def compute_default_account(project: str) -> str:
    """The Compute Engine default service account's email, as Google names it."""
    # "Compute Engine default service account ... PROJECT_NUMBER-compute@developer.
    # gserviceaccount.com" (Cloud Run docs, "Service identity").
    return f"{mock_project_number(project)}-compute@developer.gserviceaccount.com"


def _default_account(project: str, email: str, display_name: str) -> dict[str, Any]:
    name = f"projects/{project}/serviceAccounts/{email}"
    return {
        "email": email,
        "name": name,
        "id": name,
        "member": f"serviceAccount:{email}",
        "uniqueId": str(int(hashlib.sha256(email.encode()).hexdigest(), 16) % 10**21),
        "displayName": display_name,
        "project": project,
    }


class GcpMocks(Mocks):
    """Fill computed outputs the way Google Cloud does for the types listed in `_COMPUTED`.

    Other types get their inputs back plus an id; their computed outputs stay
    unknown (the run is a preview), as `pulumi preview` shows them. Data sources
    the mocks cannot answer are listed in `unanswered`.
    """

    def __init__(self, project: str | None, region: str | None) -> None:
        self.project = project or "mock-project"
        self.region = region or "us-central1"
        self.unanswered: list[str] = []

    def call(self, args: MockCallArgs) -> dict[str, Any]:
        project = _text(args.args, "project") or _text(args.args, "projectId") or self.project
        if args.token == "gcp:organizations/getProject:getProject":
            return {
                "projectId": project,
                "number": mock_project_number(project),
                "name": project,
                "id": f"projects/{project}",
            }
        if args.token == "gcp:compute/getDefaultServiceAccount:getDefaultServiceAccount":
            return _default_account(
                project, compute_default_account(project), "Compute Engine default service account"
            )
        if args.token == "gcp:appengine/getDefaultServiceAccount:getDefaultServiceAccount":
            return _default_account(
                project,
                f"{project}@appspot.gserviceaccount.com",
                "App Engine default service account",
            )
        if args.token == "gcp:organizations/getClientConfig:getClientConfig":
            return {
                "project": self.project,
                "region": self.region,
                "zone": f"{self.region}-a",
                "accessToken": "offline-access-token",
                "id": f"projects/{self.project}/regions/{self.region}/zones/{self.region}-a",
            }
        if args.token == "gcp:compute/getZones:getZones":
            region = _text(args.args, "region") or self.region
            return {
                "names": [f"{region}-{zone}" for zone in "abc"],
                "project": project,
                "region": region,
                "id": f"projects/{project}/regions/{region}",
            }
        if args.token not in self.unanswered:
            self.unanswered.append(args.token)
        return dict(args.args)

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if not args.custom:
            return None, {}
        inputs = dict(args.inputs)
        project = _text(inputs, "project") or self.project
        location = _text(inputs, "location") or _text(inputs, "region") or self.region
        handler = _COMPUTED.get(args.typ)
        if handler is None:
            return f"{args.name}-id", inputs
        resource_id, computed = handler(args.name, inputs, project, location)
        return resource_id, {**inputs, **computed}


def _account(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    email = f"{_text(inputs, 'accountId') or name}@{project}.iam.gserviceaccount.com"
    full_name = f"projects/{project}/serviceAccounts/{email}"
    unique_id = str(int(hashlib.sha256(email.encode()).hexdigest(), 16) % 10**21)
    return full_name, {
        "email": email,
        "name": full_name,
        "member": f"serviceAccount:{email}",
        "uniqueId": unique_id,
        "project": project,
    }


def _run_url(service: str, project: str, location: str) -> str:
    return f"https://{service}-{mock_project_number(project)}.{location}.run.app"


def _function(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    function = _text(inputs, "name") or name
    given = inputs.get("serviceConfig")
    service_config = dict(given) if isinstance(given, dict) else {}
    service_config.update(
        uri=_run_url(function, project, location),
        service=f"projects/{project}/locations/{location}/services/{function}",
        gcfUri="",
    )
    return f"projects/{project}/locations/{location}/functions/{function}", {
        "name": function,
        "project": project,
        "location": location,
        "environment": "GEN_2",
        "state": "ACTIVE",
        "url": f"https://{location}-{project}.cloudfunctions.net/{function}",
        "serviceConfig": service_config,
    }


def _run_service(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    service = _text(inputs, "name") or name
    url = _run_url(service, project, location)
    return f"projects/{project}/locations/{location}/services/{service}", {
        "name": service,
        "uri": url,
        "urls": [url],
    }


def _run_service_v1(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    service = _text(inputs, "name") or name
    revision = f"{service}-00001-abc"
    return f"locations/{location}/namespaces/{project}/services/{service}", {
        "name": service,
        "location": location,
        "project": project,
        "statuses": [
            {
                "url": _run_url(service, project, location),
                "latestCreatedRevisionName": revision,
                "latestReadyRevisionName": revision,
                "observedGeneration": 1,
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        ],
    }


def _function_v1(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    function = _text(inputs, "name") or name
    computed: dict[str, Any] = {"name": function, "project": project, "region": location}
    if inputs.get("triggerHttp") is True:
        computed["httpsTriggerUrl"] = f"https://{location}-{project}.cloudfunctions.net/{function}"
    if "serviceAccountEmail" not in inputs:
        # Unset, 1st gen functions run as the App Engine default service account
        # (pulumi-gcp cloudfunctions.Function: service_account_email "If not provided,
        # the function will use the project's default service account").
        computed["serviceAccountEmail"] = f"{project}@appspot.gserviceaccount.com"
    return f"projects/{project}/locations/{location}/functions/{function}", computed


def _sql_instance(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    instance = _text(inputs, "name") or f"{name}-{hashlib.sha256(name.encode()).hexdigest()[:7]}"
    return instance, {
        "name": instance,
        "connectionName": f"{project}:{location}:{instance}",
        "publicIpAddress": "203.0.113.10",
        "firstIpAddress": "203.0.113.10",
        "selfLink": f"https://sqladmin.googleapis.com/sql/v1beta4/projects/{project}/instances/{instance}",
        "project": project,
        "region": location,
    }


def _random_text(name: str, length: int, alphabet: str) -> str:
    digest = hashlib.sha256(name.encode()).digest() * (length // 32 + 1)
    return "".join(alphabet[byte % len(alphabet)] for byte in digest[:length])


def _random_string(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    length = inputs.get("length")
    count = int(length) if isinstance(length, int | float) else 16
    alphabet = ""
    if inputs.get("lower", True) is not False:
        alphabet += "abcdefghijklmnopqrstuvwxyz"
    if inputs.get("upper", True) is not False:
        alphabet += "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    if inputs.get("numeric", inputs.get("number", True)) is not False:
        alphabet += "0123456789"
    result = _random_text(name, count, alphabet or "abcdefghijklmnopqrstuvwxyz")
    return result, {"result": result}


def _random_id(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    length = inputs.get("byteLength")
    raw = hashlib.sha256(name.encode()).digest()[
        : int(length) if isinstance(length, int | float) else 8
    ]
    prefix = _text(inputs, "prefix") or ""
    return raw.hex(), {
        "hex": prefix + raw.hex(),
        "dec": prefix + str(int.from_bytes(raw, "big")),
        "b64Url": prefix + base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "b64Std": prefix + base64.b64encode(raw).decode(),
    }


def mock_static_time(name: str) -> datetime:
    """The instant the mocks give the `pulumiverse_time.Static` named `name`: fixed per name,
    as a stack's state keeps it from one run to the next."""
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(
        seconds=int.from_bytes(hashlib.sha256(name.encode()).digest()[:3], "big")
    )


def _static_time(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    moment = mock_static_time(name)
    stamp = moment.isoformat().replace("+00:00", "Z")
    return stamp, {
        "rfc3339": stamp,
        "unix": int(moment.timestamp()),
        "year": moment.year,
        "month": moment.month,
        "day": moment.day,
        "hour": moment.hour,
        "minute": moment.minute,
        "second": moment.second,
    }


def _bucket(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    bucket = inputs.get("name") or f"{name}-{hashlib.sha256(name.encode()).hexdigest()[:7]}"
    return bucket, {
        "name": bucket,
        "url": f"gs://{bucket}",
        "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}",
        "project": project,
    }


def _bucket_object(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    bucket, object_name = inputs.get("bucket", ""), inputs.get("name") or name
    return f"{bucket}-{object_name}", {
        "name": object_name,
        "outputName": object_name,
        "generation": 1,
        "mediaLink": f"https://storage.googleapis.com/download/storage/v1/b/{bucket}/o/{object_name}",
        "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}/o/{object_name}",
    }


def _database(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    database = inputs.get("name") or name
    return f"projects/{project}/databases/{database}", {
        "name": database,
        "uid": hashlib.sha256(database.encode()).hexdigest()[:32],
        "project": project,
    }


def _custom_role(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    role = f"projects/{project}/roles/{inputs.get('roleId') or name}"
    return role, {"name": role, "deleted": False}


def _repository(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    repository = inputs.get("repositoryId") or name
    return f"projects/{project}/locations/{location}/repositories/{repository}", {
        "name": repository,
        "project": project,
    }


def _scheduler_job(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    job = inputs.get("name") or name
    return f"projects/{project}/locations/{location}/jobs/{job}", {
        "name": job,
        "state": "ENABLED",
        "project": project,
        "region": location,
    }


def _api(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    return f"{project}/{inputs.get('service')}", {"project": project}


def _iam_member(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    return f"{name}-binding", {"etag": "BwYmockEtag="}


def _topic(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    # The provider's id for a topic: "projects/{{project}}/topics/{{name}}"
    # (terraform-provider-google, google/services/pubsub, the topic resource and data source).
    topic = _text(inputs, "name") or name
    return f"projects/{project}/topics/{topic}", {"name": topic, "project": project}


_COMPUTED = {
    "gcp:serviceaccount/account:Account": _account,
    "gcp:cloudfunctionsv2/function:Function": _function,
    "gcp:cloudrunv2/service:Service": _run_service,
    "gcp:cloudrun/service:Service": _run_service_v1,
    "gcp:cloudfunctions/function:Function": _function_v1,
    "gcp:sql/databaseInstance:DatabaseInstance": _sql_instance,
    "random:index/randomString:RandomString": _random_string,
    "random:index/randomPassword:RandomPassword": _random_string,
    "random:index/randomId:RandomId": _random_id,
    "time:index/static:Static": _static_time,
    "gcp:storage/bucket:Bucket": _bucket,
    "gcp:storage/bucketObject:BucketObject": _bucket_object,
    "gcp:firestore/database:Database": _database,
    "gcp:projects/iAMCustomRole:IAMCustomRole": _custom_role,
    "gcp:artifactregistry/repository:Repository": _repository,
    "gcp:cloudscheduler/job:Job": _scheduler_job,
    "gcp:projects/service:Service": _api,
    "gcp:projects/iAMMember:IAMMember": _iam_member,
    "gcp:serviceaccount/iAMMember:IAMMember": _iam_member,
    "gcp:storage/bucketIAMMember:BucketIAMMember": _iam_member,
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": _iam_member,
    "gcp:cloudrunv2/serviceIamMember:ServiceIamMember": _iam_member,
    "gcp:pubsub/topic:Topic": _topic,
    "gcp:pubsub/topicIAMMember:TopicIAMMember": _iam_member,
}
