"""Offline tools, no Pulumi CLI and no cloud: run the Pulumi program under mocks
(`mockrun`), print what it would create (`plan`, `make plan`), and evaluate a policy
pack against it as the engine would (`policy_check`, `make policy-check`)."""
