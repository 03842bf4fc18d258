"""Benchmarks are not tests: pytest pointed at bench/ collects nothing here."""

collect_ignore_glob = ["*"]
