"""``python -m pidquota``: the same as the ``pidquota`` command."""

import sys

from pidquota.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
