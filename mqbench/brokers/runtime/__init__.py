"""Runtimes that start brokers (native, external) and what they share.

Ports, readiness probes, liveness watches, and brokers started by hand.
"""
