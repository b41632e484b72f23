import sys

from keymem.services.cli import main

sys.exit(main())
