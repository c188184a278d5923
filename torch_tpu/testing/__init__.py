"""Small models shared by tests and benchmarks (built from code, no downloads)."""
