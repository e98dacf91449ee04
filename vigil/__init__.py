"""vigil: event-sourced fault diagnosis and recovery for large PyTorch/LLM training jobs.

This package holds only what every part shares: the event contract, settings,
Kafka and ClickHouse plumbing, the embedded stack and the `vigil` CLI.
"""

__version__ = "0.1.0"
