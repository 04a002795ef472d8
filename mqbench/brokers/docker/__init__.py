"""The docker runtime: compose projects, container security, container stats."""
