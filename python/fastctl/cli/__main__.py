"""``python -m fastctl.cli``: the same as the ``fastctl`` console script."""

import sys

from fastctl.cli import main

sys.exit(main())
