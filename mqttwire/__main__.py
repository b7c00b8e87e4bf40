"""``python -m mqttwire``: the same command line as ``mqttwire`` (see :mod:`mqttwire.cli`)."""

import sys

from .cli import main

sys.exit(main())
