"""Services that run as a Google default account: a 1st gen function that sets none, and
a Cloud Run v1 service given the account from get_default_service_account()."""

import pulumi_gcp as gcp

gcp.cloudfunctions.Function(
    "no-account",
    runtime="python312",
    entry_point="hello",
    trigger_http=True,
    source_archive_bucket="fixture-sources",
    source_archive_object="hello.zip",
)
default = gcp.compute.get_default_service_account()
gcp.cloudrun.Service(
    "default-account",
    location="europe-west1",
    template=gcp.cloudrun.ServiceTemplateArgs(
        spec=gcp.cloudrun.ServiceTemplateSpecArgs(
            service_account_name=default.email,
            containers=[
                gcp.cloudrun.ServiceTemplateSpecContainerArgs(image="gcr.io/cloudrun/hello")
            ],
        ),
    ),
)
