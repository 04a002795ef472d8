"""Process support (layer 0, docs/architecture.md): stop signals (``interrupts``), children
that die with mqbench (``lifeline``) and the orphan reaper script it starts (``_reaper``)."""
