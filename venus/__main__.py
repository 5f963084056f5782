"""``python -m venus`` is the ``venus`` command."""

import sys

from venus.cli import main

sys.exit(main())
