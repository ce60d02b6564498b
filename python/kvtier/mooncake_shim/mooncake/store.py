"""mooncake.store served by kvtier: MooncakeDistributedStore, ReplicateConfig
and BufferHandle are kvtier's."""

from kvtier.store import BufferHandle, MooncakeDistributedStore, ReplicateConfig  # noqa: F401

__kvtier__ = True
