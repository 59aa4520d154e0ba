"""A program that needs a package only its own virtualenv provides."""

import acme_naming
import pulumi_gcp as gcp

gcp.storage.Bucket("files", location="EU", name=acme_naming.bucket_name("files"))
