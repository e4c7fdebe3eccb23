"""Benchmarks (not tests): `make bench` runs them, each beside a same-run baseline."""
