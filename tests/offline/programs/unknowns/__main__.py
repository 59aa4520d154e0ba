"""Outputs the offline run cannot know (a Redis host, another stack's output) used inside
`apply` the way programs do; `pulumi preview` accepts this, so must the offline run."""

import pulumi
import pulumi_gcp as gcp

cache = gcp.redis.Instance("cache", memory_size_gb=1)
network = pulumi.StackReference("acme/network/prod")
database = gcp.sql.DatabaseInstance(
    "db",
    database_version="POSTGRES_15",
    settings=gcp.sql.DatabaseInstanceSettingsArgs(tier="db-f1-micro"),
)
bucket = gcp.storage.Bucket(
    "files",
    location="EU",
    labels={"vpc": network.get_output("vpcName").apply(lambda name: name.lower())},
)
pulumi.export("redis", cache.host.apply(lambda host: host + ":6379"))
pulumi.export("sqlSocket", database.connection_name.apply(lambda name: "/cloudsql/" + name))
pulumi.export("bucketUrl", bucket.url)
pulumi.export("vpc", network.require_output("vpcName"))
