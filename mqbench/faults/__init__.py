"""Fault injection: the MTTF/MTTR schedule, Toxiproxy clients and a built-in Toxiproxy-API proxy.

``schedule`` (when faults happen), ``toxics`` (toxic types, validation, shaping logic),
``tcp`` (the proxies and their event log), ``api`` (the HTTP API), ``proxy``
(``ProxyServer``, thread and process runners, ``python -m mqbench.faults.proxy``),
``client`` (``ToxiproxyClient`` for any Toxiproxy API server).
"""
