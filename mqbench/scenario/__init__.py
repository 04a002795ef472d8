"""Scenario files: pydantic models, YAML loading, ``--set`` overrides, matrix expansion."""
