"""One module per broker, each exporting ``DEFINITION`` (``mqbench/brokers/definition.py``).

``mqbench/brokers/registry.py`` lists them; docs/extending.md says how to add one.
"""
