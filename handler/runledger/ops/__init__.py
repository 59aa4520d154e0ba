"""The operator CLI (`python -m runledger.ops`): list, show, release and audit runs."""
