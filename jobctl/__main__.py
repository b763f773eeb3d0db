from __future__ import annotations

import sys

from jobctl.cli import main as cli

sys.exit(cli.entry())
