"""Seed workloads as plain PyTorch scripts (installed as the ``stave_examples`` package)."""
