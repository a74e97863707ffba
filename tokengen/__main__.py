import sys

from tokengen.cli import main

sys.exit(main())
