import sys

from keymem.services.serve import main

sys.exit(main())
