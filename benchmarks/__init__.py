"""pydla's benchmarks (kept apart from the tests): ``python -m benchmarks.cpu_suite``."""
