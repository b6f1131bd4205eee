"""``python -m multidraft`` runs the command-line interface."""

import sys

from multidraft.cli import main

sys.exit(main())
