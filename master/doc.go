// Package master is the kvtier control plane: object metadata, replicas and
// their states, read leases, pins, tenant quotas, the segment table with its
// per-segment offset allocators, client liveness, DRAM eviction and the
// coordination of SSD offload. It never carries object bytes: it says where
// they go, and clients move them.
//
// # Who may import it
//
// cmd/kvtier (to run a master), the REST front end and tests. It imports only
// kverr, internal/clock, api/kvtierpb (in grpc.go only) and
// github.com/google/btree; it never imports a mechanism (dram, ssd, transfer,
// nof) nor the client SDK. Clients reach it over gRPC: NewGRPCServer is the
// one translation layer between kvtierpb messages and the Go types here;
// every refusal leaves as kverr.ToGRPC and callers restore it with
// kverr.FromGRPC.
//
// # Contract
//
//   - Put is two-phase. PutStart validates (key non-empty and at most
//     Config.MaxKeyLen = 4096 bytes by default; size > 0; 1..MaxReplicas
//     replicas; soft-pin TTL ≤ MaxSoftPinTTL; a named preferred segment must
//     be mounted), refuses a key that is COMPLETE or in flight and younger
//     than PutDiscardTimeout (OBJECT_ALREADY_EXISTS), checks the object count
//     and the tenant quota, and places best-effort replicas on distinct
//     segments, distinct nodes first, preferred segment first, most free space
//     next. MEMORY allocations are 64-byte aligned, NOF allocations aligned to
//     the segment's block size; segments in GRACE or DRAINING take none. No
//     room for an object no MEMORY segment could ever hold, or for a put
//     with no MEMORY replica → NO_AVAILABLE_HANDLE at once (eviction frees
//     only MEMORY). No room otherwise → one synchronous eviction pass, one
//     retry; if no free extent is
//     then large enough (the pass freed bytes in lease order, scattered),
//     the objects of one address range are evicted for it (room.go: in some
//     MEMORY segment, the range of at least the object's size holding only
//     free space and objects evictable now whose eviction frees the fewest
//     bytes), and a retry; while offloads are in flight (or queued, with
//     appliances polling TakeOffload: DRAM full of objects on their way to
//     SSD), waits of up to
//     PutSpaceWait (500 ms) in all for one to land, each followed by a pass
//     and a retry; then NO_AVAILABLE_HANDLE. PutEnd (writer only, else ILLEGAL_CLIENT) flips every
//     replica to COMPLETE at once and grants no lease; PutRevoke frees the
//     reservation. An in-flight put older than PutDiscardTimeout is taken over
//     by a new writer; its space stays reserved until PutStart +
//     PutReleaseTimeout (a stalled writer may still be writing). An abandoned
//     put is revoked at that time (abandoned_puts_reclaimed).
//   - Direct puts (directput.go): PutTicket signs a client a put ticket of
//     a storage node after the authorization PutStart gets (role, tenant,
//     client ID bound to the caller); the node's PutStart, PutEnd,
//     PutRevoke and their batch forms for that client carry it
//     (put_ticket), are checked against the node's keys, the call's tenant
//     and client ID (and, with credentials, the caller being the node), and
//     leave the client ID's binding alone; PutStart then places the one
//     MEMORY replica only on that node (PutConfig.OnlyNode: no room there is
//     NO_AVAILABLE_HANDLE) and signs no write grant (the node writes its
//     own memory). PutStart's answer names the put's DRAM directory commit
//     record (dram_outbox, dram_seq); a PutEnd with holder_applies does not
//     wait for that node's acknowledgement of it (only for other holders',
//     of which a direct put has none): the node answers its client once it
//     applied the record itself, so an acknowledged put is in its holder's
//     directory as before, one master-appliance round trip sooner. It
//     also names the last free record queued for the replica's segment
//     before the placement (dram_free_seq, read after the allocation: the
//     frees of the extent's earlier occupants are at or before it); the
//     node writes the bytes once it applied the records up to it, so no
//     frame under a stale write grant for the extent runs after. A box
//     coalescing the direct puts of many clients sends BatchPutStart with
//     per_item_tickets and BatchPutEnd with items: each put keeps its own
//     client ID, tenant and ticket, checked one by one (an open master
//     takes an item without a ticket as it takes a PutStart's identity).
//     In a standalone the node also asks for its commit record quietly
//     (PutConfig.HolderPulls): queueing it wakes none of the node's
//     streams, and the node takes it from the outbox itself
//     (DramRecordsConn.TryRecv, which changes nothing there), applies it
//     and acknowledges it as a stream would; where it cannot (a free
//     among the records, whose revocation the stream goroutine drains) it
//     wakes the streams (DramRecordsConn.Wake). That saves a goroutine
//     wake-up in PutStart and the wait for the stream in the node: 1 MiB
//     direct puts with 4 callers 1.04-1.15 -> 1.31-1.40 x raw TCP.
//     A node whose master runs in another process (a cluster) asks
//     instead for the records with the answer (PutConfig.holder_takes):
//     PutStart's answer carries the node's records not yet acknowledged
//     up to the commit (dram_records; for a batch once, on the item with
//     the highest seq), when there are at most maxHolderRecords and none
//     is a free, and the node applies them at once in order, skipping
//     those it has; its stream brings them too and acknowledges them. The
//     put no longer waits for the stream (master goroutine wake-up, an
//     HTTP/2 message, the node's stream goroutine): that wait was 45-200
//     µs of a 64 KiB direct put on this VM, 0-1 µs after.
//     Such a node stages the puts of a frame of at most 1 MiB (it read
//     the bytes before asking: PutConfig.Stage, a token of its own per
//     put): PutStart (or the frame's BatchPutStart) then places and
//     commits each at once (no PutEnd; the answer says committed) and the
//     commit record carries the token; the node copies
//     the bytes in when it applies that record. Until the node
//     acknowledged it the object is marked landing (flagLanding, the
//     record's seq in lastRead): GetReplicaList waits for the
//     acknowledgement (at most DramSyncTimeout, 2 s when that is off) and
//     answers REPLICA_IS_NOT_READY naming the node after it, so no reader
//     gets the extent before the bytes are there; Exist, Remove and
//     eviction take it as stored (a free queued after the commit record
//     is applied after it). A stage on a put without a ticket is ignored,
//     on one without a checksum refused (INVALID_PARAMS); a node the
//     master keeps no records for gets its put in flight (committed
//     false) and ends it as any direct put.
//     Every other rule of a put holds unchanged.
//   - GetReplicaList returns the COMPLETE replicas — MEMORY, then NOF, then
//     LOCAL_DISK; replicas on DRAINING storage after all others; none on a
//     node that is not LIVE (a suspect node keeps its replicas but serves
//     none: readers would be sent to a box that may be dead) — and sets the
//     read lease to now + LeaseTTL. An object whose every replica is on a
//     suspect node is OBJECT_NOT_FOUND naming the node, and Exist says no
//     for it ("exists" implies "get succeeds"). Exist never touches a lease.
//   - Remove refuses a leased object (OBJECT_HAS_LEASE) unless force, and
//     always one in flight (REPLICA_IS_NOT_READY). One whose offload task
//     is dispatched (with offload immediate, every fresh put) is removed
//     once the task ends, its SSD copy with it, within RemoveSyncTimeout
//     (then REPLICA_IS_NOT_READY, nothing removed). RemoveByRegex/RemoveAll
//     skip instead of failing: they first wait (within the same bound) for
//     the offload tasks of matching objects dispatched when they were
//     called, then skip what is still in flight or being copied.
//     A removal that returned success is never undone by a restart (see
//     "Removals").
//   - Segments: MountSegment is idempotent for the same name, size, base,
//     type and node; anything else under a mounted name is
//     SEGMENT_ALREADY_EXISTS and changes nothing. UnmountSegment with a grace
//     drains (reads served, no allocations) and unmounts when the grace ends;
//     heartbeats do not remount a drained segment (an explicit MountSegment
//     does, and cancels the drain: the segment takes allocations again and
//     the old drain never unmounts it). Unmounting drops the replicas there; objects left with none
//     disappear.
//   - Clients (every node that mounts must heartbeat): silent for
//     SuspectBeats (2.5) of the beat period it reports
//     (HeartbeatRequest.Interval; ClientTTL when it reports none, and never
//     longer) → GRACE, "suspect" (its segments take no allocations, its
//     replicas are kept but not handed out, an event names it); a beat with
//     Leaving (a node shutting down) makes it GRACE at once. What a beat
//     reports broken (Unhealthy, e.g. a listener down) is listed with the
//     suspicion in ClientInfo.Problems and evented when it changes.
//     Silent for ClientTTL + ClientGrace → GONE (segments unmounted,
//     LOCAL_DISK replicas dropped, PROCESSING puts revoked, offload tasks
//     forgotten, and with "immediate" offered again from another node's
//     DRAM copy, as after a restart). A heartbeat makes it LIVE again and re-announces segments;
//     HeartbeatReply.Known is false for an unknown or GONE client. A beat's
//     SSD figures (when present) and NVMe/TCP figures replace the last ones;
//     a beat without NVMe figures clears them. ListClients returns copies.
//     A beat's CachedReads (reads the client served by reusing a running
//     read lease, at most MaxCachedReads) count as reads: read count + Count
//     and last read = beat time − LastReadAge when later than the current
//     one (so the lease moves as a GetReplicaList then would have moved
//     it); objects gone meanwhile are skipped; one invalid entry refuses
//     the whole beat before anything changes (counter cached_reads).
//   - Eviction (Run's evictor every EvictInterval while use is above its
//     trigger, else when an allocation crosses it or every evictIdleWait;
//     EvictNow, and on allocation failure): when MEMORY use exceeds HighWatermark it frees at least
//     max(EvictionRatio × capacity, use − watermark, need) bytes. Candidates:
//     COMPLETE, lease expired, not hard-pinned, holding a MEMORY replica, no
//     pending offload (unless ForceEvict); soft-pinned ones (pin not expired)
//     only in a second pass. The boundary is found with SelectByWeight, an
//     expected-O(n) three-way quickselect on the LeasePolicy's key (the lease
//     deadline, or the completion time of an unread object, plus for
//     "frequency" a bonus of min(r × FrequencyBonus, FrequencyMaxBonus,
//     FrequencyBonus + (r − 1) × FrequencyExtraLifetimes × lifetime) for an
//     object read r ≥ 1 times; see "Eviction order"). Eviction
//     frees only MEMORY replicas; an object with none left disappears.
//     Defaults: "frequency", LeaseTTL 5 s, FrequencyBonus 270 s,
//     FrequencyMaxBonus 330 s, FrequencyExtraLifetimes 0.25, chosen with
//     the replay simulator and replays through this master (package
//     replay computes its keys with this package's LeasePolicy and
//     Turnover). Each
//     pass records freed bytes/objects and, when short, the blocked objects
//     by reason (leased, pinned, in_flight, awaiting_offload) in counters and
//     LastEviction.
//     Run's evictor starts earlier, at HighWatermark − EvictionRatio/2, and
//     frees down to there, so puts find room without evicting inline (they
//     do only when an allocation fails); a scan selects the candidates of
//     8 passes and the next passes select from those kept, rechecked under
//     the object's lock (see evictor.go).
//   - Eviction history ("frequency" only): when eviction frees an object's
//     MEMORY replicas (so it leaves DRAM, whether or not a disk copy keeps
//     it alive — the simulator's "evicted"), its read count is remembered
//     under a 32-bit fingerprint of the 64-bit hash of tenant and key. The
//     history holds the last Config.EvictionHistory evictions, master-wide
//     (default EvictionHistoryPerObject = 4 × the DRAM capacity in objects,
//     estimated by each pass as capacity / mean MEMORY bytes per object, at
//     least 4,096, at most 4,000,000; it never shrinks): every remembered
//     eviction takes the next number of a master-wide sequence, and an
//     entry is valid while fewer than that many evictions came after it. The
//     entries are stored in the shard of their key (see Concurrency).
//     PutEnd of a remembered key takes the entry and starts the object at
//     count + 1 (eviction_history_hits); PutStart, a revoked put, Exist and
//     GetReplicaList never touch the history. Remove, unmount and node loss
//     record nothing. The seeded count orders eviction only: it grants no
//     lease (the object is ordered from its PutEnd time like any unread
//     object) and shows in ObjectInfo.ReadCount. A remembered key that is
//     re-put at once keeps the bonus of count+1 reads, so hot prefixes
//     survive one eviction; without the history no bonus setting beats
//     ~0.106 on conversation_trace at 5,000 blocks, with it 0.163
//     (exact LRU 0.110).
//   - Eviction order ("frequency"): the first read earns FrequencyBonus, a
//     protection horizon in time (a reused block is kept up to that long
//     after its last use, whatever the capacity: it reflects how often the
//     workload comes back to a prefix). Each further read only moves the
//     object ahead of objects read less often, by at most
//     FrequencyExtraLifetimes (0.25) DRAM lifetimes, and the total stays
//     within reads × FrequencyBonus and FrequencyMaxBonus (so both flags
//     keep their meaning as upper bounds). The lifetime is measured by
//     Turnover: the time over which the last capacity-many objects were
//     evicted (capacity in objects as estimated by the previous pass; 64
//     passes remembered, extrapolated by rate when they do not reach back
//     that far; unknown, hence no such bound, until one capacity has been
//     evicted). Each pass orders by the policy adjusted to the lifetime
//     measured over the previous passes (LifetimeScaled.ForLifetime), so
//     the pass stays O(n) and nothing per object is added. Why: a fixed
//     60 s edge of two reads over one is ~0.8 lifetimes on conversation at
//     5,000 blocks (where it is worth 0.160 → 0.164) but ~7 lifetimes on
//     synthetic at 1,000 blocks, where blocks read twice long ago crowd out
//     blocks read once just now and the policy fell to plain (through this
//     master: 0.0742 vs plain 0.0752 at 1,000 blocks, 0.1039 vs 0.1063 at
//     1,500). Scaling the whole bonus by the lifetime instead was measured
//     and rejected: at 1–8 lifetimes it loses on conversation at
//     1,000–5,000 blocks (0.127–0.164 at 5,000) and on synthetic at 1,000.
//   - Offload (mode "immediate" by default, "on-evict", "off"; changed at run
//     time by UpdateTiers): PutEnd (immediate) or an eviction candidate
//     without a COMPLETE LOCAL_DISK replica (both modes) queues a task for the
//     LIVE node that owns a COMPLETE MEMORY replica and reported an SSD tier
//     (HeartbeatRequest.Disk.Capacity > 0). The queue is bounded
//     (OffloadQueueLimit); a full queue is counted
//     (offloads_skipped_queue_full) and the object keeps its DRAM copy.
//     Tasks are handed out by TakeOffload (an appliance's long poll: it
//     waits up to MaxTakeOffloadWait for a first task and ends at once when
//     a PutEnd queues one; up to 1024 tasks per stream message to an
//     appliance that sets batched) and by heartbeats (at most OffloadSlots each,
//     for appliances without TakeOffload); each task goes out once. A
//     queued or dispatched task pins the object in DRAM. Appliances report
//     through BatchOffloadDone (every result of one group commit in one
//     call, applied under one lock per shard, each result judged as
//     OffloadDone alone judges it: one refused as bad input changes nothing) or
//     OffloadDone. OffloadDone(ok) adds a COMPLETE LOCAL_DISK
//     replica {segment "<node>/ssd", node, endpoint, bucket, offset, length};
//     failure or OffloadTimeout releases the pin (offloads_failed) and
//     marks the object so eviction frees its DRAM without a disk copy
//     instead of offering it again (a full disk must not wedge DRAM); a
//     skipped task (OffloadResult.Retry: the appliance's queue was full)
//     only releases the pin. Failure events carry the cause, at most one a
//     second per node, counting the ones left out.
//     DropBucket forgets a bucket's LOCAL_DISK replicas, visiting only the
//     objects of that bucket (the disk index, diskindex.go); bucket
//     noBucket (2^64-1) is refused, INVALID_PARAMS. RegisterDiskObjects
//     re-announces them after an appliance restart; a call with last set
//     ends that appliance's re-registration (see "Appliance identity").
//     Every HeartbeatReply carries the current SSD TierSettings.
//   - Tenants: every call carries one ("" = "default", at most 255 bytes).
//     TenantQuota counts logical object bytes (size once per object, any
//     tier) from PutStart until the object disappears.
//   - Events: Subscribe gives a bounded channel; publishing never blocks, a
//     full subscriber loses the event (events_dropped). One put event per
//     PutEventSample puts.
//   - Wire edge: replica_num 0 means 1 unless nof_replica_num > 0 (the Go API
//     itself refuses a zero total). A key that is not valid UTF-8 travels in
//     the error message instead of the ErrorInfo metadata (protobuf strings
//     must be UTF-8). ListObjects cursors are opaque: the last key for one
//     tenant, tenant NUL key with AllTenants.
//
// # Removals
//
// Remove, RemoveAll and RemoveByRegex drop the object from the master at
// once (no reader sees it, a re-put works). Copies on appliances' SSD tiers
// are removed through an outbox per appliance name: Remove queues one
// delete of the key per appliance holding a LOCAL_DISK copy (while the
// object's shard is locked); RemoveAll and RemoveByRegex queue one cutoff
// (tenant, pattern, the copies to keep: objects skipped as leased or in
// flight) per appliance that ever reported an SSD tier, whatever the number
// of keys. Appliances take removals with TakeRemovals (a long poll), make
// them durable in their SSD tier (ssd.Tier.Remove: one write and one
// fdatasync per batch, recovery applies them) and acknowledge them in their
// next call. The remove returns once every live appliance concerned has
// acknowledged; after RemoveSyncTimeout (5 s) it returns
// UNAVAILABLE_IN_CURRENT_STATUS naming the appliances that did not (the
// removal stays queued, so a restart of the appliance alone cannot bring the
// object back; only a master restart before the appliance took it can).
// While a removal is queued, an OffloadDone or RegisterDiskObjects of a copy
// it removes is refused (OBJECT_NOT_FOUND; the appliance then deletes that
// copy), so a copy written or re-registered concurrently never becomes a
// replica the removal then deletes. RemoveByRegex patterns are at most
// MaxRemovePattern (4096) bytes (INVALID_PARAMS otherwise); the scan holds
// one shard at a time and stops when ctx ends (checked between shards and
// every 1,024 keys): what it removed before is then removed on SSD by one
// delete per key, and it answers UNAVAILABLE_IN_CURRENT_STATUS.
//
// While the master settles (dramdir.go settling: it rebuilds, see
// "Rebuild", or it is in the first RebuildWindow after its start and has
// heard from no node holding objects yet, as right after a restart), a
// key it does not know may still be reported, so Remove of an unknown key
// waits for it (polling every 5 ms) instead of answering
// OBJECT_NOT_FOUND, and RemoveAll and RemoveByRegex wait for it to settle
// before they scan: a removal the caller took as done never sees the
// object come back with a late report. The wait shares RemoveSyncTimeout;
// past it the answer is UNAVAILABLE_IN_CURRENT_STATUS (retry) and nothing
// is removed. An appliance that comes back later than that (after the
// window, having missed the removal) can still report a key removed
// meanwhile as "not found": the master keeps no record of removals of
// keys it did not know.
//
// Cost, on the shared 2-core VM (load average about 10): kvtier rm of an
// object with an SSD copy took 11 ms including the CLI process start
// (tests/truth_remove_test.go, logged); the appliance's share is one
// fdatasync (ssd BenchmarkRemove: 0.35-0.60 × a 4 KiB Put). RemoveAll of
// 100,000 objects with SSD copies (and DRAM copies) took 465 ms, 0.56 × the
// same RemoveAll of 100,000 DRAM-only objects in a cluster without SSD in
// the same run (828 ms; the cutoff costs one record and an index scan, the
// rest is the master freeing DRAM space):
//
//	go test -run '^$' -bench RemoveAll100k -benchtime 1x ./tests/
//
// # Rebuild (dramdir.go)
//
// A master's object table lives in its memory; the bytes live in the
// appliances. So that a restarted master, or a newly elected leader, does
// not start with an empty DRAM tier, each appliance keeps a directory of
// the committed objects in its DRAM segments (appliance/dramdir.go),
// kept from an outbox per appliance of records: a commit (tenant, key,
// segment, offset, size, checksum, version = PutStart time) queued by
// PutStart (by PutEnd for a put without the client's checksum, see "When
// the commit record travels" below), a free (segment, offset) queued
// wherever a MEMORY replica's space is released (eviction, remove,
// revoke, take-over), before the space returns to the
// allocator, so the appliance applies it before the commit of a later put
// there. Appliances take records over TakeDramRecords, one long-lived
// stream each way per appliance: the master sends every record queued
// since its last message, the appliance applies them and sends the
// acknowledgement at once; a new stream gets the unacknowledged records
// again (applying one twice changes nothing). Streams end when Run
// returns, so a graceful stop does not wait for them.
//   - PutEnd answers once every holder of a MEMORY replica that keeps a
//     directory acknowledged the commit (at most DramSyncTimeout, 2 s;
//     past it the put still succeeds, counted in dram_commits_unconfirmed,
//     and may not survive a master loss; negative: never wait, kvtier
//     master --dram-sync-timeout -1). BatchPutEnd waits once for the
//     batch. Nodes that keep no directory (GPU nodes) cost nothing.
//     PutRevoke (BatchPutRevoke: once per batch) answers once the holders
//     dropped the revoked put's entries, within the same bound.
//   - Remove, RemoveAll and RemoveByRegex answer once the holders
//     acknowledged the frees (RemoveSyncTimeout; past it
//     UNAVAILABLE_IN_CURRENT_STATUS naming them), so a removal that
//     returned success cannot come back from a directory.
//   - An appliance that stops taking records past 1,048,576 is told to clear
//     its directory (reset); one declared gone is told to clear it when it
//     returns (HeartbeatReply.ForgetDram): in both cases its view may be
//     stale, and a stale directory could bring removed keys back.
//
// A heartbeat from an appliance the master does not know, carrying
// DramDirectory, marks the segments it re-announces "awaiting": they take
// no allocations until the appliance's report (RegisterDramObjects, last
// chunk) or RebuildWait (10 s). The report re-creates each object COMPLETE
// with a MEMORY replica at exactly the reported extent, reserved in the
// allocator (allocator.reserve refuses any overlap: the object is then
// refused, NO_AVAILABLE_HANDLE, and the appliance drops the entry); a key
// the master already holds with other bytes is refused (a put made
// meanwhile wins); a second holder of the same put (size, checksum,
// version) adds its replica. A put in flight at the old master is
// rebuilt only if its record was in a directory and its bytes had all
// landed (they pass the client's checksum), see below; otherwise its space
// is free. A rebuilt object's writer is not known, so any client's
// PutEnd of it answers success (its own writer's, whose put the old master
// never ended, must). Leases and pins restart empty; the eviction history
// is not rebuilt.
// While reports are due, and for RebuildWindow (3 s) after the master's
// start once any appliance reported objects the master never knew (so
// appliances not heard from yet get a heartbeat), reads that miss and puts
// that find every DRAM segment awaiting answer UNAVAILABLE_IN_CURRENT_STATUS
// (retry), and removals wait (see "Removals"); Stats.Rebuilding and REST
// /api/v1/ready say so with the reason.
//
// When the commit record travels. PutEnd used to queue the commit and
// wait for it: a master-appliance round trip after the write, on every
// put's critical path (64 KiB puts over TCP ran at 0.60 GB/s against 0.84
// without the wait, 4 callers, one run). A put that carries the client's
// checksum (the SDK always sends one) now has its record queued at
// PutStart, under the key's shard lock, so it reaches the appliances while
// the client writes; PutEnd still waits for its acknowledgement (the same
// guarantee: an acknowledged put is in every holder's directory), but
// finds it applied in the common case and answers at once. The record
// then describes bytes that may not have landed yet, which is safe
// because the appliance checks every entry's bytes against its checksum
// before it reports it (reportDram), and because every record goes
// through the one ordered outbox:
//   - Master dies before the record reached the appliance: as before, the
//     put is unknown to the new master, its space free; the writer's PutEnd
//     answers OBJECT_NOT_FOUND and it puts again.
//   - Master dies after the record was applied, before PutEnd: if the
//     client had written every byte, the report passes the checksum and the
//     new master rebuilds the object COMPLETE; the writer's PutEnd there
//     answers success (flagRebuilt), a retry finds it stored. These are the
//     exact bytes the writer meant; it only became visible without the
//     writer's PutEnd, which is what a put that raced a failover can
//     expect. If the write was partial (a torn or sliced multi-frame write,
//     the client died mid-way), the checksum fails, the entry is dropped and
//     the space is free.
//   - Master dies after PutEnd answered: the record was acknowledged before
//     the answer (or the wait timed out and was counted): rebuilt.
//   - Two replicas: each holder checks its own bytes; one that has them
//     all is rebuilt alone (a replica count is best effort), and one
//     report with the same (size, checksum, version = PutStart time) from
//     the other holder adds its replica.
//   - Client dies after writing: the put stays in flight until the reaper
//     revokes it (PutReleaseTimeout); the revoke's free drops the entry.
//     A master death before that rebuilds it (its bytes are whole).
//   - PutRevoke and BatchPutRevoke wait for their frees' acknowledgement,
//     so a put the client gave up on (say one replica failed) does not come
//     back after a failover. A take-over of an abandoned put queues the
//     old put's frees at once, before its retired space can be reused.
//   - Reuse of an extent: the free of the old occupant is queued before the
//     space returns to the allocator, and the new put's commit only at its
//     PutStart, after the allocation; one outbox per appliance delivers them
//     in that order, and a commit also drops every entry it overlaps. An
//     entry whose bytes a later write changed fails its checksum at report.
//   - A forged record: records come only from the master, over the
//     appliance's authenticated TakeDramRecords stream; a client names
//     nothing but its checksum, which it also gives readers. A client that
//     lies about its checksum gets an entry that fails the check at report
//     (and reads that fail it, a miss). Nobody can plant an entry through
//     the data port: it carries no commit record.
//
// The alternative proposed earlier (the last WRITE frame carries the
// commit record to the appliance's transfer server) saves the same round
// trip but needs every transport (TCP, shared memory, local, RDMA, which
// writes one-sided with no server code on the appliance) to carry it, and
// a grant that binds the record's tenant, key and checksum so a holder of
// a write grant cannot plant entries. Queuing at PutStart needs neither.
// A put without the client's checksum keeps the old order (record after
// the write, at PutEnd; the appliance computes the checksum then), since
// without one a report could not tell a whole write from a torn one.
//
// Cost: a put with a checksum waits at PutEnd only when its record has
// not been applied yet (the write was faster than the record stream;
// counter dram_commit_waits; measured against a standalone, 2026-12-02:
// 14-15 % of 64 KiB puts over TCP, 6 % of BatchPutEnds of 16 x 64 KiB,
// 2.5 % of 1 MiB puts, 68 % / 26 % of 64 KiB puts through shared memory
// with 1 / 4 callers, where the write takes ~10 µs); one
// without waits one master-appliance round trip (shared by the PutEnds of
// one batch and by concurrent ones) and costs one CRC32C pass over its
// bytes on the appliance; about 100 bytes plus the key per object in the
// appliance's memory. On the shared 2-core
// VM a 4 KiB put into a standalone store took 1.6-1.8 x the time of the
// same put into one started with --no-dram-directory, in the same run
// (102-118 against 63-64 µs with 2 callers, 50-51 against 28-32 µs with
// 16; two runs; a call per batch instead of one stream cost 3.0 x; with a
// load average of 9-14 from other work the difference drowned in noise,
// 0.9-1.3 x):
//
//	go test -run '^$' -bench PutDramDirectory -benchtime 3000x ./tests/
//
// # Appliance identity
//
// Each start of an appliance is an incarnation (random ID) sent with every
// mount and heartbeat, with the identity of its SSD directory (DiskID,
// persisted there; only one process can hold the directory). The first
// incarnation the master sees of a name holds it. A contact from another
// incarnation of that name is a restart when the old one is provably or
// probably dead: same DiskID, same data address, old one not LIVE, or
// silent for RestartTakeover (3 s: three default heartbeat intervals; a
// kill -9'd appliance stops beating at once). A restart drops the old
// incarnation's segments at once (their MEMORY and NOF replicas; objects
// left with none disappear, so a re-put works; a pending drain ends with
// them), resets its offload tasks and revokes its in-flight puts; its
// LOCAL_DISK replicas (dropped at once when it comes back with another
// DiskID) stay, unconfirmed (never handed to readers: a read
// of an object with nothing else answers UNAVAILABLE_IN_CURRENT_STATUS
// naming the node, Exist says no), and an offload task it had taken
// becomes an unconfirmed placeholder replica, since its copy may be
// durable. The new incarnation mounts its segments at its own address and
// registers what its SSD tier recovered (RegisterDiskObjects, the last call
// marked last); then its copies still unconfirmed are dropped (at the
// latest DiskRegisterWait, 2 min, after the restart): registered copies
// are kept and missing or quarantined ones dropped, so an object the box
// held on SSD never vanishes in between (a get of it 4 s after a restart
// once answered "no such object"). Until then every Remove also queues the
// key's removal for the box, and its registration creates an object the
// master does not hold only when the master dropped that copy when the box
// went gone (a copy written after the master forgot its task, or whose
// object was removed meanwhile, never comes back; the appliance removes
// copies refused so). A box that comes back after it was declared gone
// registers under the same rules (diskindex.go, "Restarts"; counter
// appliance_restarts, a "client" event). A late contact of a replaced
// incarnation (the last four are remembered) is refused, ILLEGAL_CLIENT,
// rather than taken for another restart. Otherwise two live processes claim
// one name: the newcomer's mounts, heartbeats and unmounts are refused with
// ILLEGAL_CLIENT naming both incarnations and addresses (the appliance
// retries for 10 s, then exits non-zero). Nodes that send no incarnation
// (GPU nodes, CLI calls) are never refused.
//
// # Sessions
//
// With credentials (cmd: --credentials), Authorizer (authz.go) checks every
// gRPC and fast-path call before its handler: the principal (token or
// client certificate, internal/auth), its role for the method, its tenant,
// and its session: BindSession binds a client ID to the principal that
// first names it, and refuses the ID to any other principal (an admin may
// also name an ID bound to another) for as long as the master may still hold
// the client's state (2 × (ClientTTL + ClientGrace), at least a minute,
// after the last call naming it). The writer checks of PutEnd/PutRevoke
// (ILLEGAL_CLIENT when another client ID ends a put) and of OffloadDone
// and BatchOffloadDone (the task's node) then hold against forgery, since a client ID can no
// longer be borrowed. Session(clientID) and auth.FromContext(ctx) expose
// the principal. Without credentials no Authorizer runs and no session is
// kept.
//
// Data-plane grants name the session they were issued to (grpc.go,
// grantSession): with credentials the call's principal, so a grant issued
// to one credential names it; open, the client ID. A node's grant keys
// (which sign any grant for its data port) are handed in a heartbeat
// answer only to the principal the node's client ID is bound to
// (mayHoldGrantKeys): another appliance credential naming the ID is
// refused by BindSession, an admin naming it gets no keys. The data port
// itself does not check the session (internal/grant, doc.go: a grant is a
// bearer capability for its extent until its expiry).
//
// # Concurrency
//
// Objects live in 256 shards (hash of tenant and key), each a mutex and a
// map; Put, Get, Exist and Remove take one shard lock and no global lock.
// Each shard also holds the eviction-history entries of its keys (a FIFO
// ring of fingerprint, count and sequence number plus a linear-probing
// index), guarded by the same mutex: eviction and PutEnd already hold it,
// so the history adds no lock. Validity is master-wide (an atomic eviction
// sequence), not per shard: a ring of exactly the shard's share would
// forget the blocks of one prefix, evicted together, at scattered times,
// and a prefix is cut at its first forgotten block (measured through this
// master on the traces: 0.158 instead of 0.164 on conversation at 5,000
// blocks, and below plain on synthetic at 1,000). The rings are sized with
// slack (share + 4·√share + 8) so they rarely drop a valid entry.
// Segments are a copy-on-write snapshot read without locking; each segment's
// allocator has its own mutex. Lock order: shard → offload queue /
// abandoned list / segment. An allocation holds its shard lock, and an
// unmount marks the segment removed before scanning shards, so no replica
// escapes the scan. Eviction passes are serialized; a short pass backs off
// the background evictor (10 ms doubling to 1 s) so a store full of leased
// objects is not rescanned every few milliseconds.
//
// # Memory
//
// Per object: the composite key (one length byte, tenant, key), a 96-byte
// object and one 48-byte replica per copy, plus a 24-byte entry in its
// shard's DRAM index while it holds a MEMORY replica (so that eviction
// passes skip SSD-only objects). Measured: 277 heap bytes per object at
// 1,000,000 objects in DRAM with 32-byte keys (248 before the DRAM index;
// a bare map[string]*struct with the same keys: 104 B). Eviction passes allocate 24 + 24 bytes per
// candidate transiently. The eviction history costs ~15 bytes per entry
// (fingerprint 4, count 2, sequence 4, index slot 4 at load ≤ 0.75) plus
// the rings' slack: 65 B per live object at its default 4 entries
// per object. The disk index costs 52 B per LOCAL_DISK replica (measured
// at 200,000 SSD-only objects, 8,192 a bucket: TestDiskIndexMemory).
//
// # Figures
//
// go test -run '^$' -bench . ./master/ on the shared 2-core build VM (Xeon,
// load average ~9 from other jobs, so absolute rates are low and vary ±2×
// between runs; each ratio is measured interleaved in one loop, so it is the
// reliable figure). Run of 2026-11-29 16:10:
//
//	in-process, 2 goroutines  PutStart+PutEnd   195,600 pairs/s
//	                          GetReplicaList    288,000 keys/s
//	                          Exist           1,412,800 keys/s (0.36 of a bare sharded mutex+map lookup)
//	                          BatchGet 128      240,500 keys/s
//	                          BatchExist 128    475,800 keys/s
//	                          BatchPut 128      135,100 pairs/s
//	gRPC loopback, 1 caller   GetReplicaList     17,952/s beside a bare unary call with the same
//	                                             messages 17,885/s: 1.00 (target ≥ 0.5)
//	                          Exist              13,424/s: 1.05 of bare
//	                          PutStart+PutEnd     5,675 pairs/s
//	                          BatchGet 128      161,625 keys/s = 18.2× single (target ≥ 10×)
//	                          BatchExist 128    583,327 keys/s = 45.0× single
//	                          BatchPut 128       79,709 pairs/s = 22.2× single
//	heap per live object      248 B at 1,000,000 objects, 32-byte keys (target < 300);
//	                          313 B with the eviction history full at its default
//	                          size (4,000,000 entries, 65 B per object; run of
//	                          2026-11-29 19:10); 277 / 342 B since the DRAM index
//	                          (2026-11-30 00:53)
//	eviction pass             100k DRAM objects: 4-14 ms; beside 900k SSD-only
//	                          objects 0.54-0.67 x that (16 x when passes scanned
//	                          every object), BenchmarkEvictPassTiered
//	select 5% of 10M          128 ms, one core (target < 1 s); full sort 1,878 ms (14.7×)
//	DropBucket of 64 objects  beside 10k SSD objects 19-20 µs, beside 1M 28-29 µs
//	                          (the scan it replaced: 0.26-0.28 ms and 175-191 ms,
//	                          alternated in one run, load average 1.3-3.3;
//	                          BenchmarkDropBucket, 2026-12-02)
//
// # Caveats
//
// A master restart or failover forgets leases, pins, read counts and the
// eviction history; objects come back from the appliances' DRAM
// directories and SSD re-registrations (see "Rebuild"). A read that arrives
// at a restarted master before any appliance re-announced itself misses
// (OBJECT_NOT_FOUND), because the master cannot yet know it restarted;
// appliances beat at once when they see a new master, which keeps that
// window to a connection's reconnect. A removal the appliances did not
// acknowledge (it returned an error naming them) can come back if the
// master dies before they take it: the outbox is in memory. ListObjects and
// RemoveByRegex scan every shard (operator paths). CheckInvariants is for
// quiescent states (tests, fuzzing).
//
// Removals and gone appliances: an appliance declared gone (silent past
// ClientTTL+ClientGrace) holds no replica in the master's view, yet its SSD
// may hold copies. Removes made meanwhile are queued for it without being
// waited for (per key; past 65,536 keys of a tenant, one cutoff of that
// tenant's every key, which costs it those copies) and applied when it comes
// back, before its re-registration can bring them back. Those queues live
// in the master's memory: if the master restarts while an appliance is
// gone, keys removed meanwhile can come back from that appliance. Every
// other remove that returned success was acknowledged by the appliances
// first.
package master
