"""kvtier standing in for Mooncake's Python package (see kvtier.mooncake_path).
Only mooncake.store exists here; code that needs Mooncake's transfer engine
or its other modules needs the real package."""

__kvtier__ = True
