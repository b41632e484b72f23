"""The limits of one request, shared by every layer that checks them.

The MCP tool schemas, the memory service, the graph, the lexicon and the reranker import these,
so what one layer accepts no other refuses (a namespace that passes the tool schema is one the
graph stores). Sizes are in characters unless the name says otherwise.
"""

from __future__ import annotations

NAMESPACE_MAX_CHARS = 128
CONTENT_MAX_CHARS = 20_000  # one memory
KEY_MAX_CHARS = 200
KEYS_PER_MEMORY_MAX = 32
RELATED_MAX = 64  # related_to ids per memory
ID_MAX_CHARS = 64  # a memory or key id
BATCH_MAX_ITEMS = 200  # memories per remember_batch
# A search query (the lexicon's limit; the embedder truncates and says so).
QUERY_MAX_CHARS = 16_384
# A prompt inject reads, and the MCP recall query: the hook keeps both ends of a longer prompt.
PROMPT_MAX_CHARS = 4_000

# Candidates search reranks (a cold pool of 64 short memories costs the reranker ~60 ms of CPU),
# and the most a caller may ask for.
POOL_DEFAULT = 64
POOL_MAX = 200
RERANK_MAX_PASSAGES = 64  # per reranker call: a bigger pool goes in pieces
COVERAGE_MAX_IDS = 100  # memories per lexicon.coverage call
RERANK_QUERY_MAX_CHARS = 2_000  # the reranker cuts a longer query

# Liveness: a peer silent for interval x liveness is dead (router and workers, both ways).
DEFAULT_HEARTBEAT_INTERVAL_MS = 1_000
DEFAULT_HEARTBEAT_LIVENESS = 3

# A memory-service call that arrives without a deadline of its own (in-process callers) gets
# this much time for everything it asks the other services.
DEFAULT_BUDGET_MS = 10_000
# The head of a memory the reranker's cosine reads first and the graph's dense leg keeps a
# vector of (its passage vector, made once for both while the memory service is idle).
PASSAGE_HEAD_CHARS = 1_000
