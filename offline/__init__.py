"""Offline tools: run the Pulumi program under mocks (`mockrun`) and print its plan (`plan`)."""
