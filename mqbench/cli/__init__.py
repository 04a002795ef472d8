"""The command line (Typer + Rich): the only layer that prints, prompts or exits."""
