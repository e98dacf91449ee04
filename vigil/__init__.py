"""vigil: event-sourced fault diagnosis and recovery for large PyTorch/LLM training jobs.

One import name for everything. This package's own modules are the kernel every component
shares (`contract`, `settings`, `errors`, `kafka`, `clickhouse`, `service`); `vigil.app` is
the application that wires the components; the components (`vigil.timer`, `vigil.collector`,
`vigil.analyzer`, `vigil.dashboard`, `vigil.recovery`) live in the repository's root
folders, linked in here. Importing `vigil` itself loads nothing: a training process that
imports `vigil.timer` gets the standard library and torch only.
"""

__version__ = "0.1.0"
