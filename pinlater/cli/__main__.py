"""`python -m pinlater.cli ...`: the `pinlater` command."""

import sys

from pinlater.cli.main import main

sys.exit(main())
