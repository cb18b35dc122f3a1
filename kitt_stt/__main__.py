"""``python -m kitt_stt`` is the ``kitt-stt`` command."""

import sys

from kitt_stt.cli import main

sys.exit(main())
