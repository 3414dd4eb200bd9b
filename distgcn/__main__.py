"""``python -m distgcn`` is the ``distgcn`` command."""

import sys

from distgcn.cli.main import main

sys.exit(main())
