"""keymem's MCP front end (``keymem mcp``): tools, prompt and instructions over the router.

``server.build_server`` assembles the SDK server; ``backend`` is its only road to keymem (the
router's ``memory`` service); ``models`` are the tools' output shapes; ``provenance`` stamps the
host session on writes; ``prompt`` holds what the agent is told. The SDK is imported only here,
never by the services or the hook.
"""
