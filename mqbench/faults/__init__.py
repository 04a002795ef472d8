"""Fault injection: the MTTF/MTTR schedule, Toxiproxy clients and a built-in Toxiproxy-API proxy."""
