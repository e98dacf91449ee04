import sys

from vigil.app.cli.main import main

sys.exit(main())
