"""`python -m pinlater ...`: the `pinlater-server` command."""

import sys

from pinlater.main import main

sys.exit(main())
