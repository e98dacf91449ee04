import sys

from vigil.cli.main import main

sys.exit(main())
