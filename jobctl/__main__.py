from __future__ import annotations

import sys

from jobctl import cli

sys.exit(cli.main())
