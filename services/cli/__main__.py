import sys

from keymem.services.entry import keymem

sys.exit(keymem())
