"""Setups that work and must not be "fixed": a Pub/Sub job without attempt_deadline, a job
calling a Google API with OAuth, plus one roles/editor and one Cloud SQL client grant."""

import pulumi_gcp as gcp

runner = gcp.serviceaccount.Account("runner", account_id="runner")
gcp.cloudscheduler.Job(
    "nightly-topic",
    schedule="0 3 * * *",
    pubsub_target=gcp.cloudscheduler.JobPubsubTargetArgs(
        topic_name="projects/fixture-project/topics/nightly", data="e30="
    ),
)
gcp.cloudscheduler.Job(
    "start-workflow",
    schedule="0 4 * * *",
    attempt_deadline="320s",
    http_target=gcp.cloudscheduler.JobHttpTargetArgs(
        uri="https://workflowexecutions.googleapis.com/v1/projects/fixture-project/locations/europe-west1/workflows/nightly/executions",
        http_method="POST",
        oauth_token=gcp.cloudscheduler.JobHttpTargetOauthTokenArgs(
            service_account_email=runner.email
        ),
    ),
)
gcp.projects.IAMMember(
    "runner-editor", project="fixture-project", role="roles/editor", member=runner.member
)
gcp.projects.IAMMember(
    "runner-sql", project="fixture-project", role="roles/cloudsql.client", member=runner.member
)
