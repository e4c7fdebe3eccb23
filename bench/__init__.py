"""Benchmarks (not tests). `make bench` runs them all; each prints figures beside a same-run baseline."""
