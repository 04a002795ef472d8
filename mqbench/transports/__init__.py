"""Protocol clients behind one small interface (``base.Client``) and a registry by name."""
