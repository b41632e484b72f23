import sys

from services.serve import main

sys.exit(main())
