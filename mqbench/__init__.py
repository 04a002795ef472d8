"""mqbench: honest, reproducible message-broker benchmarks."""

__version__ = "0.1.0"
