"""``python -m pidquota``: the same as the ``pidquota`` command."""

import sys

from pidquota.cli.main import main

sys.exit(main())
