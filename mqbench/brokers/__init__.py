"""Broker specs, runtimes that start them (native, external, docker) and resource samplers."""
