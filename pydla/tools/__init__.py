"""Command-line tools (trtexec- and Polygraphy-style)."""
