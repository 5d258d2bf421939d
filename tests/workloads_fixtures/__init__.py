"""Workloads for the workloads-layer tests: hostile factories and small probe models."""
