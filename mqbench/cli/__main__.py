"""``python -m mqbench.cli``."""

from mqbench.cli.app import main

main()
