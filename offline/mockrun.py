"""Run a Pulumi Python project under Pulumi's mocks and capture what it would register.

No Pulumi CLI, provider plugin or cloud credentials are involved: the project's
real program runs in-process against a mock resource monitor, exactly as
`pulumi up` would run it, and every resource registration is recorded in the form
the engine and CrossGuard policies see it (wire form: camelCase property names,
numbers as floats, plus parent, dependencies and provider).

Public API (shared with the policy pack's offline checker; keep it stable):

    run_program(project_dir, stack) -> ProgramResources
        A list of CapturedResource, the root stack first, with `.stack_outputs`.
    CapturedResource
        type, name, urn, id, custom, inputs, outputs, parent, dependencies,
        property_dependencies, provider, protect, aliases.
    ProgramFailed
        The program stopped cleanly with a message (config errors, pulumi.RunError).

The runner knows nothing about this repository's infrastructure code: it reads
`Pulumi.yaml` (project name, `main`, `stackConfigDir`) and `Pulumi.<stack>.yaml`
with the offline tools' one stack-file reader (`offline.stack_file`), passes the
stack config through PULUMI_CONFIG as the Python language host does,
and runs `main`. It therefore works on any copy of the template and on other
Pulumi Python programs for Google Cloud. The mocks fill the computed outputs
Google Cloud would return for the types they know (service account emails, Cloud
Run URLs, Cloud SQL connection names, ...); every other computed output is
unknown, as in `pulumi preview`: the program runs as a preview (dry run), so
`apply` callbacks on an unknown value are skipped instead of receiving None.

Recorded values keep what the engine knows about them: `Secret(value)` for a
secret, `UNKNOWN` for a value not known before the update (see `reveal`).

A program with its own virtualenv (Pulumi.yaml `runtime.options.virtualenv`, or
`virtualenv=`) runs in a subprocess with that environment's interpreter and
packages (`python -m offline.mockrun`), which sends back the wire form.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import runpy
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs, Mocks
from pulumi.runtime.settings import get_root_resource, reset_options

from offline.event_loops import close_leftover_loops
from offline.stack_file import StackFileError, read_project, read_stack_values

STACK_TYPE = "pulumi:pulumi:Stack"
# What an encrypted (`secure:`) stack value becomes offline: it cannot be decrypted.
SECRET_PLACEHOLDER = "offline-placeholder"
REPO_ROOT = Path(__file__).resolve().parents[1]


class ProgramFailed(Exception):
    """The program (or its stack files) rejected the configuration; `str()` is the message."""


class Unknown:
    """A value the engine would not know before the update (a computed output, in preview)."""

    def __repr__(self) -> str:
        return "[unknown]"


UNKNOWN = Unknown()


@dataclass(frozen=True)
class Secret:
    """A value the program marked secret; `value` may itself be nested data."""

    value: Any

    def __repr__(self) -> str:
        return "[secret]"


def reveal(value: Any) -> Any:
    """`value` with every `Secret` replaced by its content (what policies are handed)."""
    if isinstance(value, Secret):
        return reveal(value.value)
    if isinstance(value, dict):
        return {key: reveal(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [reveal(item) for item in value]
    return value


def decode(value: Any) -> Any:
    """A wire value (protobuf Struct/ListValue/scalar) as Python data, secrets and unknowns kept
    where they are: the SDK's own decoder pushes a secret up to its enclosing map or list."""
    if isinstance(value, str) and value == rpc.UNKNOWN:
        return UNKNOWN
    if isinstance(value, struct_pb2.ListValue):
        return [decode(item) for item in value]
    if not isinstance(value, struct_pb2.Struct):
        return value
    if rpc._special_sig_key not in value:
        decoded = {key: decode(item) for key, item in value.items()}
        return {key: item for key, item in decoded.items() if item is not None}
    signature = value[rpc._special_sig_key]
    if signature == rpc._special_secret_sig:
        return Secret(decode(value["value"]))
    if signature == rpc._special_output_value_sig:
        inner = decode(value["value"]) if "value" in value else UNKNOWN
        return Secret(inner) if value.get("secret") else inner
    if signature == rpc._special_resource_sig:
        return value["urn"]
    return rpc.deserialize_properties(value)  # an asset or archive


@dataclass(frozen=True)
class CapturedResource:
    """One registered resource as the engine would see it.

    inputs: properties the program passed, in wire form (camelCase, floats).
    outputs: state after the (mock) create: inputs plus computed properties; for the
        root stack, the resolved stack outputs; for components, their registered outputs.
    parent: URN of the parent resource (None only for the root stack).
    dependencies: URNs from `depends_on` and from the Outputs used as inputs.
    property_dependencies: per input property, the URNs its value came from.
    provider: provider reference, or None for the default provider.
    protect: whether the resource was registered with `protect=True`.
    aliases: the URNs its `aliases` option says it had before, resolved as the engine
        does (an alias spec leaves out what did not change: name, type or parent).
    """

    type: str
    name: str
    urn: str
    id: str | None
    custom: bool
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    parent: str | None
    dependencies: tuple[str, ...]
    property_dependencies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    provider: str | None = None
    protect: bool = False
    aliases: tuple[str, ...] = ()


class ProgramResources(list[CapturedResource]):
    """Every captured resource, plus the resolved stack outputs.

    Resources are in the order the monitor received them; independent resources
    register concurrently, so that order can differ between runs.
    """

    stack_outputs: dict[str, Any]
    notes: list[str]

    def __init__(
        self,
        resources: list[CapturedResource],
        stack_outputs: dict[str, Any],
        notes: list[str] | None = None,
    ) -> None:
        super().__init__(resources)
        self.stack_outputs = stack_outputs
        # What the offline run had to stand in for (secure values, unanswered data sources).
        self.notes = notes or []

    def of_type(self, type_: str) -> list[CapturedResource]:
        """The resources with type token `type_`."""
        return [resource for resource in self if resource.type == type_]


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
}


def _wire_json(struct: Any) -> dict[str, Any]:
    """A protobuf Struct as JSON data; `_from_wire_json` turns it back."""
    return json_format.MessageToDict(struct)


def _from_wire_json(data: Mapping[str, Any]) -> dict[str, Any]:
    struct = struct_pb2.Struct()
    json_format.ParseDict(dict(data), struct)
    decoded = decode(struct)
    return decoded if isinstance(decoded, dict) else {}


class CapturingMonitor(MockMonitor):
    """The stock mock monitor drops parents and dependencies; this one records them.

    Each record keeps properties in wire form (JSON of the protobuf Struct), so a
    run in the program's own interpreter can hand them back unchanged.
    """

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.records: list[dict[str, Any]] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        custom = bool(request.custom)
        self.records.append(
            {
                "type": request.type,
                "name": request.name,
                "urn": response.urn,
                "id": response.id or None,
                "custom": custom,
                "inputs": _wire_json(request.object) if request.type != STACK_TYPE else {},
                "outputs": _wire_json(response.object) if custom else {},
                "parent": request.parent or None,
                "dependencies": list(request.dependencies),
                "property_dependencies": {
                    key: list(value.urns) for key, value in request.propertyDependencies.items()
                },
                "provider": request.provider or None,
                "protect": bool(request.protect),
                "aliases": [self._alias_urn(request, alias) for alias in request.aliases],
            }
        )
        return response

    def _alias_urn(self, request: Any, alias: Any) -> str:
        """The previous URN one alias names: a full URN, or a spec of what differed."""
        if alias.WhichOneof("alias") == "urn":
            return alias.urn
        spec = alias.spec
        parent = "" if spec.noParent else (spec.parentUrn or request.parent)
        return self.make_urn(parent, spec.type or request.type, spec.name or request.name)

    def RegisterResourceOutputs(self, request: Any) -> Any:
        for record in self.records:
            if record["urn"] == request.urn and not record["custom"]:
                record["outputs"] = _wire_json(request.outputs)
        return super().RegisterResourceOutputs(request)


def _captured(record: Mapping[str, Any]) -> CapturedResource:
    return CapturedResource(
        type=record["type"],
        name=record["name"],
        urn=record["urn"],
        id=record["id"],
        custom=record["custom"],
        inputs=_from_wire_json(record["inputs"]),
        outputs=_from_wire_json(record["outputs"]),
        parent=record["parent"],
        dependencies=tuple(record["dependencies"]),
        property_dependencies={
            key: tuple(urns) for key, urns in record["property_dependencies"].items()
        },
        provider=record["provider"],
        protect=record["protect"],
        aliases=tuple(record["aliases"]),
    )


@dataclass(frozen=True)
class _Project:
    name: str
    program: Path
    virtualenv: Path | None


def _read_project(project_dir: Path) -> _Project:
    try:
        document = read_project(project_dir)
    except StackFileError as error:
        raise ProgramFailed(str(error)) from None
    runtime = document.get("runtime")
    runtime_name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if runtime_name != "python":
        raise ProgramFailed(
            f"{project_dir / 'Pulumi.yaml'}: runtime is {runtime_name!r}, not python"
        )
    options = runtime.get("options") if isinstance(runtime, dict) else None
    virtualenv = options.get("virtualenv") if isinstance(options, dict) else None
    program = project_dir / str(document.get("main") or ".")
    if program.is_dir() and not (program / "__main__.py").is_file():
        raise ProgramFailed(f"{program}: no __main__.py")
    if not program.exists():
        raise ProgramFailed(f"{program}: main program not found")
    return _Project(
        name=document["name"],
        program=program,
        virtualenv=project_dir / str(virtualenv) if isinstance(virtualenv, str) else None,
    )


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _without_secure(value: Any) -> tuple[Any, bool]:
    """`value` with every `{secure: ...}` replaced by the placeholder; whether any was."""
    if _is_secure(value):
        return SECRET_PLACEHOLDER, True
    if isinstance(value, dict):
        pairs = {key: _without_secure(item) for key, item in value.items()}
        return {key: item for key, (item, _) in pairs.items()}, any(f for _, f in pairs.values())
    if isinstance(value, list):
        items = [_without_secure(item) for item in value]
        return [item for item, _ in items], any(f for _, f in items)
    return value, False


@dataclass
class _StackConfig:
    values: dict[str, str]
    secret_keys: list[str]
    notes: list[str]


def _stack_config(project_dir: Path, stack: str) -> _StackConfig:
    """The stack's config map as the language host passes it: every value a string.

    Encrypted (`secure:`) values need the stack's secrets provider, which an
    offline run does not have: each becomes SECRET_PLACEHOLDER, still marked
    secret, and a note names the keys, so the run goes on and says what it assumed.
    """
    try:
        config = read_stack_values(project_dir, stack)
    except StackFileError as error:
        raise ProgramFailed(str(error)) from None
    flat: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, raw in config.items():
        value, replaced = _without_secure(raw)
        if replaced:
            secret_keys.append(str(key))
        flat[str(key)] = value if isinstance(value, str) else json.dumps(value)
    notes = []
    if secret_keys:
        notes.append(
            f"Pulumi.{stack}.yaml: encrypted values of {', '.join(secret_keys)} cannot be "
            f"decrypted offline; each is the secret placeholder {SECRET_PLACEHOLDER!r}"
        )
    return _StackConfig(flat, secret_keys, notes)


def _local_module_names(workdir: Path) -> set[str]:
    """Top-level modules and packages the program directory provides."""
    names = set()
    for path in workdir.iterdir():
        if path.suffix == ".py":
            names.add(path.stem)
        elif (path / "__init__.py").is_file():
            names.add(path.name)
    names.discard("__main__")
    return names


@contextlib.contextmanager
def _program_environment(config: _StackConfig, workdir: Path, project_dir: Path) -> Iterator[None]:
    """PULUMI_CONFIG and cwd as the language host sets them, and the program's own imports.

    A module already imported under a name the program directory also provides
    (e.g. `dedup_schedule` from another copy of the template) is set aside for the
    run, so the program imports its own code; the program's modules are unloaded
    afterwards and the set-aside ones restored. Libraries (pulumi_gcp, ...) stay
    loaded: they may register themselves with the Pulumi runtime only once.
    """
    saved_env = {key: os.environ.get(key) for key in ("PULUMI_CONFIG", "PULUMI_CONFIG_SECRET_KEYS")}
    saved_cwd = Path.cwd()
    saved_path = list(sys.path)
    local = _local_module_names(workdir)
    shadowed = {name: module for name, module in sys.modules.items() if name.split(".")[0] in local}
    for name in shadowed:
        del sys.modules[name]
    before = set(sys.modules)
    os.environ["PULUMI_CONFIG"] = json.dumps(config.values)
    os.environ["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(config.secret_keys)
    pulumi.runtime.set_all_config({})
    os.chdir(workdir)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for name in set(sys.modules) - before:
            module_file = getattr(sys.modules[name], "__file__", None)
            if module_file and Path(module_file).resolve().is_relative_to(project_dir):
                del sys.modules[name]
        sys.modules.update(shadowed)


# --- a failing program, said in one short block ---------------------------------------


def _requirement_for(module: str, project_dir: Path) -> str | None:
    """The line of the program's requirements.txt that most likely provides `module`."""
    try:
        lines = (project_dir / "requirements.txt").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    wanted = re.sub(r"[-_.]+", "-", module.split(".")[0]).lower()
    for line in lines:
        name = re.split(r"[<>=!~;\[ ]", line.strip(), maxsplit=1)[0]
        if name and re.sub(r"[-_.]+", "-", name).lower() == wanted:
            return line.strip()
    return None


def _missing_module(error: ModuleNotFoundError, project_dir: Path, python: str) -> str:
    module = error.name or str(error)
    requirement = _requirement_for(module, project_dir)
    package = requirement or re.sub(r"_+", "-", module.split(".")[0])
    return (
        f"the program imports {module!r}, which is not installed for {python}. Install the "
        f"program's requirements in its own virtualenv (python -m venv venv && venv/bin/pip "
        f"install -r requirements.txt; it needs {package!r}) and name it in Pulumi.yaml "
        "runtime.options.virtualenv or with --virtualenv DIR."
    )


def _resource_in_trace(trace: Any) -> str | None:
    """`type 'name'` of the resource being constructed where the error was raised, if any."""
    found = None
    while trace is not None:
        local = trace.tb_frame.f_locals
        candidate = local.get("__self__", local.get("self"))
        name = local.get("resource_name", local.get("name"))
        if isinstance(candidate, pulumi.Resource) and isinstance(name, str):
            cls = type(candidate)
            found = f"{cls.__module__.rsplit('.', 1)[0]}.{cls.__name__} {name!r}"
        trace = trace.tb_next
    return found


def _is_program_file(filename: str, project_dir: Path) -> bool:
    """A file of the program itself: under its directory, not an installed package."""
    path = Path(filename)
    return (
        path.is_absolute()
        and path.resolve().is_relative_to(project_dir)
        and "site-packages" not in path.parts
    )


@contextlib.contextmanager
def _apply_tracebacks(seen: dict[int, Any]) -> Iterator[None]:
    """Keeps the traceback of an exception raised in an `apply` callback.

    The SDK re-raises such an exception from its own task queue with only its
    own frames, which would hide the program's line; `seen` maps the exception
    to the traceback it had when it left the callback.
    """
    original = pulumi.Output.apply

    def apply(self: pulumi.Output[Any], func: Any, run_with_unknowns: bool = False) -> Any:
        def traced(value: Any) -> Any:
            try:
                return func(value)
            except Exception as error:
                seen[id(error)] = error.__traceback__
                raise

        return original(self, traced, run_with_unknowns)

    pulumi.Output.apply = apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        pulumi.Output.apply = original  # type: ignore[method-assign]


def _failure(error: BaseException, project_dir: Path, seen: Mapping[int, Any]) -> str:
    """The error, the innermost line of the program it came from, and the resource, if known."""
    message = " ".join(str(error).split()) or type(error).__name__
    lines = [f"the program failed: {type(error).__name__}: {message}"]
    trace = seen.get(id(error), error.__traceback__)
    frames = [
        frame
        for frame in traceback.extract_tb(trace)
        if _is_program_file(frame.filename, project_dir)
    ]
    if frames:
        frame = frames[-1]
        where = Path(frame.filename).resolve().relative_to(project_dir)
        lines.append(f"  at {where}:{frame.lineno}: {(frame.line or '').strip()}")
    resource = _resource_in_trace(trace)
    if resource:
        lines.append(f"  while declaring {resource}")
    return "\n".join(lines)


# --- running the program ---------------------------------------------------------------


async def _wire_outputs(values: Mapping[str, Any]) -> dict[str, Any]:
    return _wire_json(await rpc.serialize_properties(dict(values), {}))


def _run_here(project: _Project, project_dir: Path, stack: str) -> dict[str, Any]:
    """Runs the program in this interpreter; the result in wire form (see `_result`)."""
    config = _stack_config(project_dir, stack)
    mocks = GcpMocks(config.values.get("gcp:project"), config.values.get("gcp:region"))
    monitor = CapturingMonitor(mocks)
    stack_outputs: dict[str, Any] = {}
    workdir = project.program if project.program.is_dir() else project.program.parent
    seen: dict[int, Any] = {}

    with _program_environment(config, workdir, project_dir), _apply_tracebacks(seen):
        # A preview (dry run): outputs the mocks do not fill are unknown, as the engine has them.
        reset_options(project=project.name, stack=stack, preview=True)
        pulumi.runtime.set_mocks(
            mocks, project=project.name, stack=stack, preview=True, monitor=monitor
        )
        sys.path.insert(0, str(workdir))

        @pulumi.runtime.test
        def execute() -> Any:
            runpy.run_path(str(project.program), run_name="__main__")
            exported = dict(getattr(get_root_resource(), "outputs", {}))

            async def collect() -> None:
                stack_outputs.update(await _wire_outputs(exported))

            return asyncio.ensure_future(collect())

        try:
            execute()
        except pulumi.RunError as error:
            raise ProgramFailed(str(error)) from None
        except ModuleNotFoundError as error:
            raise ProgramFailed(_missing_module(error, project_dir, sys.executable)) from None
        except (Exception, SystemExit) as error:
            raise ProgramFailed(_failure(error, project_dir, seen)) from None

    notes = list(config.notes)
    if mocks.unanswered:
        notes.append(
            "data sources the offline run cannot answer (their results are empty): "
            + ", ".join(mocks.unanswered)
        )
    return {"records": monitor.records, "outputs": stack_outputs, "notes": notes}


def _result(wire: Mapping[str, Any]) -> ProgramResources:
    stack_outputs = _from_wire_json(wire["outputs"])
    resources = [
        dataclasses.replace(_captured(record), outputs=stack_outputs)
        if record["type"] == STACK_TYPE
        else _captured(record)
        for record in wire["records"]
    ]
    return ProgramResources(resources, stack_outputs, list(wire["notes"]))


def program_python(project_dir: Path, virtualenv: Path | None = None) -> tuple[str | None, str]:
    """The interpreter to run the program with (None: this one) and a note when it is not used.

    An explicit `virtualenv` must exist; the one Pulumi.yaml names is used when it
    exists, else this interpreter is, with a note saying so (the program may
    then miss packages, which is reported by name).
    """
    project_dir = Path(project_dir).resolve()
    declared = _read_project(project_dir).virtualenv
    chosen = Path(virtualenv).resolve() if virtualenv is not None else declared
    if chosen is None:
        return None, ""
    python = chosen / "bin" / "python"
    if not python.is_file():
        if virtualenv is not None:
            raise ProgramFailed(f"{chosen}: not a virtualenv (no bin/python)")
        return None, (
            f"Pulumi.yaml names the virtualenv {chosen.name!r}, which does not exist; running "
            f"with {sys.executable}"
        )
    if python.absolute() == Path(sys.executable).absolute():
        return None, ""
    return str(python), ""


def _run_elsewhere(python: str, project_dir: Path, stack: str) -> dict[str, Any]:
    """Runs `python -m offline.mockrun` in the program's own environment; its wire result."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "result.json"
        environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        command = [python, "-m", "offline.mockrun", str(project_dir), stack, str(out)]
        completed = subprocess.run(command, env=environment, check=False)
        if not out.is_file():
            raise ProgramFailed(
                f"{python} could not run the program (exit {completed.returncode}); it needs "
                "the pulumi and pyyaml packages"
            )
        document = json.loads(out.read_text(encoding="utf-8"))
    if "failed" in document:
        raise ProgramFailed(document["failed"])
    return document


def run_program(project_dir: Path, stack: str, virtualenv: Path | None = None) -> ProgramResources:
    """Run the Pulumi project in `project_dir` for `stack` under mocks; return what it registered.

    Runs in the program's own virtualenv when there is one (`program_python`).
    Raises ProgramFailed when the stack files are unreadable or the program
    stops: a clean error (`pulumi.RunError`, e.g. a config error) keeps its
    message; any other exception is reported with where it happened.
    """
    project_dir = Path(project_dir).resolve()
    project = _read_project(project_dir)
    python, note = program_python(project_dir, virtualenv)
    if python is None:
        wire = _run_here(project, project_dir, stack)
    else:
        wire = _run_elsewhere(python, project_dir, stack)
    result = _result(wire)
    if note:
        result.notes.insert(0, note)
    return result


def _main(argv: list[str]) -> int:
    """`python -m offline.mockrun DIR STACK OUT.json`: the run in the program's interpreter."""
    project_dir, stack, out = Path(argv[0]).resolve(), argv[1], Path(argv[2])
    try:
        document = _run_here(_read_project(project_dir), project_dir, stack)
    except ProgramFailed as failed:
        document = {"failed": str(failed)}
    out.write_text(json.dumps(document), encoding="utf-8")
    close_leftover_loops()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
