"""Handler-versus-baseline benchmarks, run by `make bench` (`python -m bench`).

Importing the package puts `handler/` on sys.path, as the deployed function
has it, so the in-process measurements import the very `runledger` package
that the served handler runs. Kept tiny: the cold-start probe imports it too.
"""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
HANDLER_DIR = REPO_ROOT / "handler"

if str(HANDLER_DIR) not in sys.path:
    sys.path.append(str(HANDLER_DIR))
