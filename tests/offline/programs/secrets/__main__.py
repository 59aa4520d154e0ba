"""A secret from an encrypted stack value, used deep inside a Cloud Run service."""

import pulumi
import pulumi_gcp as gcp

config = pulumi.Config()
password = config.require_secret("dbPassword")
gcp.cloudrunv2.Service(
    "api",
    location="europe-west1",
    template=gcp.cloudrunv2.ServiceTemplateArgs(
        containers=[
            gcp.cloudrunv2.ServiceTemplateContainerArgs(
                image="gcr.io/cloudrun/hello",
                envs=[
                    gcp.cloudrunv2.ServiceTemplateContainerEnvArgs(name="MODE", value="prod"),
                    gcp.cloudrunv2.ServiceTemplateContainerEnvArgs(
                        name="DB_URL",
                        value=pulumi.Output.concat("postgres://app:", password, "@db"),
                    ),
                ],
            )
        ],
    ),
)
pulumi.export("token", pulumi.Output.secret("plain-token-value"))
