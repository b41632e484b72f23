import sys

from keymem.services.entry import service

sys.exit(service())
