"""vigil test suite (a package, so tests/<name> never shadows the <name> package)."""
