import sys

from starverse.cli import main

sys.exit(main())
