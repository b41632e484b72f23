"""``keymem ui``: a local web page to search the memory and walk its key/value graph.

``access`` guards it with a token kept in KEYMEM_HOME, ``gateway`` carries each request to the
router's ``memory`` service, ``app`` holds the JSON endpoints, and ``static/`` the page itself
(plain JS, no library, nothing fetched from the network).
"""
