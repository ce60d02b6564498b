// Package appliance composes one kvtier storage box: hugepage DRAM segments,
// the SSD tier, the offload mover and the transfer-engine server, joined to
// the cluster through the client SDK.
//
// Start maps the configured DRAM once and touches every page (first touch of
// fresh memory is ~60x slower than reuse on these VMs, so segments are
// pre-faulted once and never given back), splits it into segments of
// SegmentSize, serves them over the transfer engine and mounts them on the
// master. Unless Transfer.DisableSharedMemory is set (--shm=false) the DRAM
// is a shared memfd (dram.MapShared) offered to clients on the same host
// (transfer.Engine.ShareMemory), which then copy through it instead of
// crossing loopback TCP; if the memfd cannot be made, the DRAM is mapped
// privately with a warning. With an SSD directory it opens the SSD tier (rebuilding its index
// from the bucket metadata after a restart), serves bucket extents to readers
// through the same engine (extent source "<name>/ssd") and re-registers every
// recovered object with the master as a LOCAL_DISK replica; the last
// RegisterDiskObjects call says the registration is over (the master then
// drops the copies it held for this box and did not get back). A copy the
// master refuses as unknown or stale (its object removed, never
// acknowledged, or of another size) is removed from the SSD tier, so no
// later registration brings it back (appliance.go, registerDisk).
//
// Its data port also takes direct puts (directput.go; internal/transfer
// "Direct puts"): a client's frame of keys, checksums and bytes, placed on
// this box's segments through the master (PutStart with the client's put
// ticket, only_node), read into the extents and committed (PutEnd), one
// round trip for the client. In a standalone the box calls its master
// in-process (Config.PutMaster, and the DRAM directory's records stream,
// Config.DramRecords); with a master in another process it coalesces the
// calls of concurrent direct puts, of any clients, into batch calls
// carrying each put's own ticket (coalesce.go), and applies the DRAM
// directory records up to each put's commit from PutStart's answer
// (dramdir.go, takeRecords) instead of waiting for its records stream.
// There a frame of at most 1 MiB (one put or a batch) is staged
// (staged.go): the engine reads and checks its bytes first, one PutStart
// (BatchPutStart) places and commits its puts (PutConfig.stage), and the
// box copies each put's bytes into its extent when it applies the put's
// commit record; the master hands the replica to readers only once the
// box acknowledged that record. One master round trip a frame instead of
// two.
//
// The offload mover takes the tasks the master hands out (copy this MEMORY
// replica to SSD): through TakeOffload, a long poll it repeats whenever its
// queue has room, so a task arrives as soon as the master queues it; with a
// master that lacks TakeOffload, in heartbeat answers (once a second, which
// capped a stream of puts into full DRAM at about 0.3 GB/s). It writes them
// to the SSD tier (the workers pipeline ssd.Tier.PutAsync, up to 16384
// objects written and not yet reported) and reports them only once the
// tier's group commit made them durable, in batches: one BatchOffloadDone
// for every object whose commit is over when the previous call returned
// (one OffloadDone each with a master that lacks it; reporting 4 KiB
// objects one call at a time, 64 per worker in flight, capped puts into
// full DRAM at 2.2k keys/s); a full queue refuses the task for this round (the
// master keeps the DRAM copy and counts the skip). Bucket eviction asks the
// master to drop a bucket's LOCAL_DISK replicas before deleting it.
//
// With NVMe export configured, the appliance also serves namespaces over
// NVMe/TCP and mounts each as a NOF segment: either through the built-in
// target (package nof/target, the default) or, with Backend "spdk", by making
// an operator's SPDK target match a plan over its JSON-RPC socket (package
// nof/spdk: attach controllers, aio files, malloc bdevs, lvols; one subsystem
// named after the appliance). SPDK objects are left in place on Close unless
// Teardown is set: operators own their SPDK target. Either way the heartbeat
// carries the exported namespaces' I/O figures to the master (built-in: the
// target's counters and connected hosts; SPDK: bdev_get_iostat, refreshed
// every SPDKConfig.WatchInterval (1 s) off the heartbeat path, without
// hosts), for REST /api/v1/nvme and the web UI. With SPDK, the same round
// probes SPDK's liveness: two failed probes in a row, or an SPDK that
// answers without the export (restarted), unmount the NOF segments (logged
// at warn; the master publishes the unmount), and when SPDK answers again
// the plan is re-applied and they are remounted.
// NVMeHealth says why the export does not serve (a built-in target listener
// that cannot accept, or SPDK gone), for the appliance's liveness report.
//
// Removals: a long poll (TakeRemovals) takes the master's removals of SSD
// copies, records each batch durably in the SSD tier (ssd.Tier.Remove) and
// acknowledges it in the next call. An offload is reported done only while
// its copy is still stored, under a read lock that removals take for
// writing (removeMu), so no copy a removal took becomes a replica; a copy
// the master refuses is removed; a stale copy of a key with other bytes is
// replaced.
//
// DRAM directory (dramdir.go): a long poll (TakeDramRecords) takes the
// master's commit and free records for the DRAM segments and keeps, in
// memory, the committed objects (key, tenant, segment, offset, size,
// checksum, version) per segment by offset: a commit drops any entry it
// overlaps, a free drops the entry there. A put with the client's
// checksum is recorded from its PutStart, before its bytes land; a put
// without one is recorded at PutEnd and gets a checksum computed when its
// commit arrives. When the master does not know
// the appliance (a heartbeat answered known=false: it restarted, or a new
// leader was elected) the appliance reports the directory
// (RegisterDramObjects), after checking each entry's bytes against its
// checksum (an entry whose bytes changed or never all landed is dropped,
// never reported), and
// drops the entries the master refuses. In memory only: an appliance
// restart loses the DRAM it describes anyway; the master is what may
// restart under it.
//
// Identity (identity.go): each Start is a new incarnation (random), sent
// with the SSD directory's id (<ssd-dir>/appliance-id) in every mount and
// heartbeat; the master treats a new incarnation of a known name as a
// restart. Without Config.Name, DefaultName derives a name unique per host
// and stable per SSD directory. A mount refused because another live
// incarnation holds the name is retried for 10 s, then Start fails.
//
// Close drains: it stops taking offload work, unmounts every segment on the
// master (after DrainGrace, during which reads are still served), says
// goodbye (a leaving heartbeat: the master stops handing out this box's
// replicas at once rather than after the silence), stops the engine, seals
// the SSD tier and unmaps the memory.
//
// Health: every heartbeat carries what is broken on this box
// (HeartbeatRequest.unhealthy: a data listener backing off or stopped);
// the master lists it and /api/v1/ready reports the cluster degraded. A
// failed offload (disk full, I/O error) is logged at most once every 5 s
// with its cause and the count of failures not logged, and reported to the
// master, which lets the object leave DRAM without a disk copy.
//
// Importers: cmd/kvtier and tests. The appliance never imports package master.
package appliance
