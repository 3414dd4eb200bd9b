"""``python -m distgcn`` is the ``distgcn`` command."""

import sys

from .cli import main

sys.exit(main())
