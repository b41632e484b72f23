"""Hugging Face ONNX models: which ones we know, where they live, how they get there.

Shared by the embedder's ONNX backend and the reranker's cross-encoder.
"""
