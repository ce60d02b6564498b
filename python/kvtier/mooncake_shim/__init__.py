"""A directory to put on PYTHONPATH (kvtier.mooncake_path()) so that
`import mooncake.store` in an engine and every process it spawns resolves to
kvtier. Opt-in: nothing changes unless you add it to the path."""
