"""`python -m imagekit.probe` (and the zipapp's entry): the check, printing one JSON document."""

import sys

from .run import main

sys.exit(main())
