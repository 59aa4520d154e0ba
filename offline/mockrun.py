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

The runner knows nothing about the resources this repository's program creates: it
reads `Pulumi.yaml` (project name, `main`, `stackConfigDir`) and `Pulumi.<stack>.yaml`
with the template's one stack-file reader (`dedup_schedule.stack_file`), passes the
stack config through PULUMI_CONFIG as the Python language host does, and runs `main`.
It therefore works on any copy of the template. The mocks fill the computed outputs
Google Cloud would return (service account emails, Cloud Run URIs, resource ids), so
`apply` callbacks see realistic values instead of None.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import runpy
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs, Mocks
from pulumi.runtime.settings import get_root_resource, reset_options

from dedup_schedule.config import ConfigError
from dedup_schedule.stack_file import read_project, read_stack_values, stack_file

STACK_TYPE = "pulumi:pulumi:Stack"


class ProgramFailed(Exception):
    """The program (or its stack files) rejected the configuration; `str()` is the message."""


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

    def __init__(self, resources: list[CapturedResource], stack_outputs: dict[str, Any]) -> None:
        super().__init__(resources)
        self.stack_outputs = stack_outputs

    def of_type(self, type_: str) -> list[CapturedResource]:
        """The resources with type token `type_`."""
        return [resource for resource in self if resource.type == type_]


def mock_project_number(project: str) -> str:
    """A stable 12-digit stand-in for the project number Google would return."""
    return str(
        100_000_000_000 + int(hashlib.sha256(project.encode()).hexdigest(), 16) % (9 * 10**11)
    )


class GcpMocks(Mocks):
    """Fill computed outputs the way Google Cloud does for the resources we create.

    Unknown types get their inputs back plus an id, which keeps any program running.
    """

    def __init__(self, project: str | None, region: str | None) -> None:
        self.project = project or "mock-project"
        self.region = region or "us-central1"

    def call(self, args: MockCallArgs) -> dict[str, Any]:
        if args.token == "gcp:organizations/getProject:getProject":
            project = args.args.get("projectId") or self.project
            return {
                "projectId": project,
                "number": mock_project_number(project),
                "name": project,
                "id": f"projects/{project}",
            }
        return dict(args.args)

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if not args.custom:
            return None, {}
        inputs = dict(args.inputs)
        project = inputs.get("project") or self.project
        location = inputs.get("location") or inputs.get("region") or self.region
        handler = _COMPUTED.get(args.typ)
        if handler is None:
            return f"{args.name}-id", inputs
        resource_id, computed = handler(args.name, inputs, project, location)
        return resource_id, {**inputs, **computed}


def _account(name: str, inputs: dict, project: str, location: str) -> tuple[str, dict]:
    email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
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
    function = inputs.get("name") or name
    service_config = dict(inputs.get("serviceConfig") or {})
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
    service = inputs.get("name") or name
    url = _run_url(service, project, location)
    return f"projects/{project}/locations/{location}/services/{service}", {
        "name": service,
        "uri": url,
        "urls": [url],
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


class CapturingMonitor(MockMonitor):
    """The stock mock monitor drops parents and dependencies; this one records them."""

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.captured: list[CapturedResource] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        custom = bool(request.custom)
        inputs = rpc.deserialize_properties(request.object) if request.type != STACK_TYPE else {}
        outputs = rpc.deserialize_properties(response.object) if custom else {}
        self.captured.append(
            CapturedResource(
                type=request.type,
                name=request.name,
                urn=response.urn,
                id=response.id or None,
                custom=custom,
                inputs=dict(inputs),
                outputs=dict(outputs),
                parent=request.parent or None,
                dependencies=tuple(request.dependencies),
                property_dependencies={
                    key: tuple(value.urns) for key, value in request.propertyDependencies.items()
                },
                provider=request.provider or None,
                protect=bool(request.protect),
                aliases=tuple(self._alias_urn(request, alias) for alias in request.aliases),
            )
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
        outputs = rpc.deserialize_properties(request.outputs)
        for index, resource in enumerate(self.captured):
            if resource.urn == request.urn and not resource.custom:
                self.captured[index] = dataclasses.replace(resource, outputs=dict(outputs))
        return super().RegisterResourceOutputs(request)


@dataclass(frozen=True)
class _Project:
    name: str
    program: Path


def _read_project(project_dir: Path) -> _Project:
    try:
        document = read_project(project_dir)
    except ConfigError as error:
        raise ProgramFailed(str(error)) from None
    runtime = document.get("runtime")
    runtime_name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if runtime_name != "python":
        raise ProgramFailed(
            f"{project_dir / 'Pulumi.yaml'}: runtime is {runtime_name!r}, not python"
        )
    program = project_dir / str(document.get("main") or ".")
    if program.is_dir() and not (program / "__main__.py").is_file():
        raise ProgramFailed(f"{program}: no __main__.py")
    if not program.exists():
        raise ProgramFailed(f"{program}: main program not found")
    return _Project(name=document["name"], program=program)


def _stack_config(project_dir: Path, stack: str) -> dict[str, str]:
    """The stack's config map as the language host passes it: every value a string."""
    try:
        config = read_stack_values(project_dir, stack)
    except ConfigError as error:
        raise ProgramFailed(str(error)) from None
    flat: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            raise ProgramFailed(
                f"{stack_file(project_dir, stack)}: {key} is an encrypted secret; "
                "offline runs cannot decrypt"
            )
        flat[str(key)] = value if isinstance(value, str) else json.dumps(value)
    return flat


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
def _program_environment(
    config: Mapping[str, str], workdir: Path, project_dir: Path
) -> Iterator[None]:
    """PULUMI_CONFIG and cwd as the language host sets them, and the program's own imports.

    A module already imported under a name the program directory also provides
    (e.g. `dedup_schedule` from another copy of the template) is set aside for the
    run, so the program imports its own code; the program's modules are unloaded
    afterwards and the set-aside ones restored. Libraries (pulumi_gcp, ...) stay
    loaded: they may register themselves with the Pulumi runtime only once.
    """
    saved_env = {key: os.environ.get(key) for key in ("PULUMI_CONFIG", "PULUMI_CONFIG_SECRET_KEYS")}
    saved_cwd = Path.cwd()
    local = _local_module_names(workdir)
    shadowed = {name: module for name, module in sys.modules.items() if name.split(".")[0] in local}
    for name in shadowed:
        del sys.modules[name]
    before = set(sys.modules)
    os.environ["PULUMI_CONFIG"] = json.dumps(dict(config))
    os.environ["PULUMI_CONFIG_SECRET_KEYS"] = "[]"
    pulumi.runtime.set_all_config({})
    os.chdir(workdir)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
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


def run_program(project_dir: Path, stack: str) -> ProgramResources:
    """Run the Pulumi project in `project_dir` for `stack` under mocks; return what it registered.

    Raises ProgramFailed when the stack files are unreadable or the program stops
    with a clean error (`pulumi.RunError`, e.g. a config error). Any other
    exception from the program is a bug in it and propagates unchanged.
    """
    project_dir = Path(project_dir).resolve()
    project = _read_project(project_dir)
    config = _stack_config(project_dir, stack)
    mocks = GcpMocks(config.get("gcp:project"), config.get("gcp:region"))
    monitor = CapturingMonitor(mocks)
    stack_outputs: dict[str, Any] = {}
    workdir = project.program if project.program.is_dir() else project.program.parent

    with _program_environment(config, workdir, project_dir):
        reset_options(project=project.name, stack=stack, preview=False)
        pulumi.runtime.set_mocks(
            mocks, project=project.name, stack=stack, preview=False, monitor=monitor
        )

        @pulumi.runtime.test
        def execute() -> pulumi.Output[None]:
            runpy.run_path(str(project.program), run_name="__main__")
            root = get_root_resource()
            exported = getattr(root, "outputs", {})
            return pulumi.Output.from_input(dict(exported)).apply(stack_outputs.update)

        try:
            execute()
        except pulumi.RunError as error:
            raise ProgramFailed(str(error)) from None

    resources = [
        dataclasses.replace(resource, outputs=dict(stack_outputs))
        if resource.type == STACK_TYPE
        else resource
        for resource in monitor.captured
    ]
    return ProgramResources(resources, stack_outputs)
