"""``python -m mqbench``."""

from mqbench.cli.app import main

main()
