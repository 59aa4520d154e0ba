"""A program whose own code fails inside an apply callback, in a module of its own."""

import pulumi
import pulumi_gcp as gcp
from naming import label_for

bucket = gcp.storage.Bucket("files", location="EU")
pulumi.export("label", bucket.name.apply(label_for))
