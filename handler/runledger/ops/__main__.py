"""`python -m runledger.ops`: the operator CLI (`runledger.ops.cli`)."""

import sys

from runledger.ops.cli import main

sys.exit(main())
