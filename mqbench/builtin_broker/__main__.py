"""``python -m mqbench.builtin_broker [OPTIONS]``: same as ``mqbench broker serve``."""

from __future__ import annotations

from mqbench.cli.broker_cmd import main

if __name__ == "__main__":
    main()
