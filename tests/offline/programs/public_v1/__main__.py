"""A 1st gen HTTP function open to allUsers, and a Cloud Run v1 service with the invoker
IAM check switched off by annotation: both public, both must fail the check."""

import pulumi_gcp as gcp

function = gcp.cloudfunctions.Function(
    "hello",
    runtime="python312",
    entry_point="hello",
    trigger_http=True,
    source_archive_bucket="fixture-sources",
    source_archive_object="hello.zip",
    service_account_email="hello-fn@fixture-project.iam.gserviceaccount.com",
)
gcp.cloudfunctions.FunctionIamMember(
    "hello-public",
    cloud_function=function.name,
    region=function.region,
    role="roles/cloudfunctions.invoker",
    member="allUsers",
)
gcp.cloudrun.Service(
    "open-v1",
    location="europe-west1",
    metadata=gcp.cloudrun.ServiceMetadataArgs(
        annotations={"run.googleapis.com/invoker-iam-disabled": "true"},
    ),
    template=gcp.cloudrun.ServiceTemplateArgs(
        spec=gcp.cloudrun.ServiceTemplateSpecArgs(
            service_account_name="open-v1@fixture-project.iam.gserviceaccount.com",
            containers=[
                gcp.cloudrun.ServiceTemplateSpecContainerArgs(image="gcr.io/cloudrun/hello")
            ],
        ),
    ),
)
