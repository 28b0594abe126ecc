"""Process support: fatal worker deaths, durable writes, child processes, readiness, CPU accounting, metrics,
which modules run compiled."""
