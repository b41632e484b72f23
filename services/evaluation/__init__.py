"""``keymem eval``: recall quality on a benchmark file, next to flat baselines in the same run.

One concern per module: ``dataset`` (the file format, validated), ``metrics`` (recall@k,
all@k, hit@k, MRR), ``tokens`` and ``baselines`` (bm25, dense, hybrid as BASELINES.md defines
them), ``deployment`` (a throwaway supervised keymem), ``loader`` (writing the benchmark in),
``recall`` (asking keymem), ``runner`` (one run), ``report`` (tables and JSON), ``progress``.
"""
