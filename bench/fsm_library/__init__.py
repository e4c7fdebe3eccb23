"""A bench-only Django app: the same ping-pong order, driven by the real django-fsm-2 library
(`FSMField`, `@transition`, `ConcurrentTransitionMixin`) with a history row per change. Its
tables are created by the transitions suite; it is installed only by `make bench`."""
