"""The ``memory`` service: keymem's agent-facing API (search, inject, navigation, writes).

Its workers run as threads of the router process (``keymem.services.router.process``) and
compose the model, lexicon and graph workers through the broker.
"""
