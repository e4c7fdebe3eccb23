"""A bench-only Django app: the `order` suite's viewflow flow (`flows.py`) and the rows the
SpiffWorkflow baseline keeps (`models.py`). Installed only by `bench/settings.py`; its tables are
made by `bench.bench_order` (viewflow's own tables by viewflow's migrations)."""
