"""Benchmarks (scripts that print JSON) and the cached real-model set, ``real_models``."""
