"""Entry point for ``python -m durable_host``."""

import sys

from durable_host.cli import main

sys.exit(main())
