"""python -m stalloc: the same command line as the `stalloc` script."""

import sys

from .cli import main

__all__: list[str] = []

sys.exit(main())
