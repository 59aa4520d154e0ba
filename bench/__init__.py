"""Handler-versus-baseline benchmarks, run by `make bench` (`python -m bench`).

`runledger` comes from the editable install, i.e. the very `handler/runledger`
package that the served handler runs. Kept tiny: the cold-start probe imports it too.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
