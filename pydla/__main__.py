"""``python -m pydla``: the ``pydla`` command."""

import sys

from pydla.tools.cli import main

sys.exit(main())
