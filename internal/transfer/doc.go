// Package transfer is kvtier's transfer engine: one-sided READ and WRITE of
// (segment, offset, length) between a caller's buffer and registered memory
// of a node, batched, sliced and completed asynchronously.
//
// # Structure
//
// An Engine is a router over one small interface, Transport (transport.go),
// with one implementation per file, each owning its peers, connections and
// wire state:
//
//	local.go      local copy: the segment is registered in this Engine
//	shm.go        same-host shared memory: a peer's memfd segments mapped here
//	rdmatransport.go  one-sided RDMA verbs over package rdma (rdma_on.go
//	              opens a device, build tag rdma only; tests run the same
//	              logic over a fake fabric, rdma_fake_test.go)
//	mem.go        an in-memory network of engines (MemNet), for tests
//	tcp.go        framed TCP (client side; tcpbatch.go packs batch frames;
//	              server.go, srvbatch.go serve frames; tls.go dials TLS)
//	putframe.go   direct puts (op 6): putclient.go sends them, srvput.go
//	              serves them through the node's PutHandler
//
// The Engine itself keeps only what is common: the registry of local
// segments and extent sources (registry.go: the one record of them in a
// process; the appliance and the client SDK look segments up there), the
// batching of a Submit's requests per transport, MaxInflightBytes, and
// the accounting (Stats).
//
// Routing: a request whose segment is registered here is local. Any other
// goes to the first transport in Routes() that reaches it now: shared
// memory (the peer is on this host and its mapping holds the segment),
// RDMA (the request's Offer names a side channel, and this engine has a
// device), in-memory (a "mem://" endpoint), TCP (every other endpoint).
// When a transport fails a request with TRANSFER_FAIL for a
// connection-level reason (peer unreachable, mapping gone, a queue pair
// broken, the handshake refused) the request is handed to the next route
// that reaches it (Stats.Fallbacks), with its whole range again (READ and
// WRITE are idempotent); a refusal (INVALID_PARAMS, SEGMENT_NOT_FOUND,
// PERMISSION_DENIED, a source's own code) is final, as is a failure after
// Close or once the caller's ctx ended, and a shared-memory WRITE that
// overlapped the peer's death. A request no route reaches fails with
// TRANSFER_FAIL naming its endpoint.
//
// What a node offers beyond TCP travels with its replicas: Engine.Offer
// (a SegmentOffer: RDMA side-channel address, the segment's region base
// and rkey) is announced when the node mounts the segment, the master
// copies it into every replica descriptor of it without reading it, and
// the client SDK (client.replicaRequest) puts it in Request.Offer.
//
// # Contract
//
// An Engine serves the segments (memory) and extent sources (read-only, e.g.
// SSD buckets) registered in it, on every address passed to Listen (and,
// with RDMA on, to one-sided RDMA through its side channel), and moves its
// callers' Requests:
//
//   - Local: a request whose Segment is registered in the same Engine is one
//     copy() (or one ReadExtent straight into Buf), whatever its Endpoint.
//     Submit performs it before returning.
//   - TCP: otherwise, over the framed protocol below, to Endpoint. Each peer
//     gets Config.ConnsPerPeer connections; a request larger than
//     Config.SliceSize is cut into frames spread over them (a segment READ
//     of 512 KiB up to SliceSize in two halves while two connections are
//     idle, so both sides work on it at once); each connection
//     pipelines up to Config.PipelineDepth frames. Payload bytes go from the
//     source memory to the socket in one writev with their header and from the
//     socket into the destination (the server's segment memory for WRITE,
//     the caller's Buf for READ); a WRITE payload of 128 KiB or more passes
//     through a small buffer that stays in the server's cache, moved on with
//     non-temporal stores (readInto), so the kernel's copy does not first
//     read every line of cold segment memory.
//     The serving side reads a frame's head (header, name, grant) with one
//     read, which may take the first bytes of a payload or of the next
//     pipelined frame along; those are handed on first (frameReader).
//     Extent-source reads go through a pooled buffer on the serving side, and
//     are never sliced (a request with Bucket != 0 travels as one frame of at
//     most 64 MiB) so a source always sees whole extents and can verify their
//     checksums.
//   - TLS: an Endpoint "tls://host:port" (TLSScheme; what an engine with
//     Config.ServerTLS is advertised as, TLSEndpoint) is the same protocol
//     inside crypto/tls: the dial handshakes (verifying with
//     Config.ClientTLS) before the first frame, and the serving side wraps
//     every accepted connection when Config.ServerTLS is set, so a peer
//     without TLS, or that does not trust the certificate, moves nothing.
//     Shared-memory discovery dials the same way.
//   - Shared memory: a request to a peer on this host (Endpoint is a
//     loopback address or one of this host's interface addresses) whose
//     segment the peer shares (ShareMemory: its memory is a memfd) is one
//     copy() through the peer's memory mapped into this process; see
//     "Shared memory" below. Everything else about it (bounds checks,
//     errors, Sum) is as for TCP. Config.DisableSharedMemory turns it off.
//   - RDMA (build tag rdma, Config.RDMADevice; see "RDMA" below): a
//     request whose Offer names an RDMA side channel, from an engine with a
//     device, is moved with one-sided RDMA READ/WRITE, in SliceSize work
//     requests, straight from Buf when Buf lies in a region registered here
//     (a segment, the client's local buffer), else through a registered
//     bounce buffer; Sum is computed as the bytes land in Buf. Errors,
//     bounds and grants as for TCP, except as said under "RDMA".
//   - In-memory (Config.MemNet, tests): a "mem://NAME" endpoint is served by
//     the engine attached as NAME, synchronously, exactly as its TCP server
//     serves a frame (grant, lookup, bounds, copy, error codes).
//   - Config.MaxInflightBytes bounds the caller's bytes in flight and,
//     separately, the serving side's extent buffers. Segment traffic needs no
//     server buffers at all, so many clients cannot exhaust the server's memory.
//   - Batch.Wait returns one error per request, in order. Errors carry kverr
//     codes: TRANSFER_FAIL (peer unreachable, connection or I/O failure,
//     engine closed, context cancelled before the request started),
//     SEGMENT_NOT_FOUND, INVALID_PARAMS (out of bounds, bad op, write to an
//     extent source), and whatever code an ExtentSource returned (e.g.
//     CHECKSUM_MISMATCH), always with the segment and the reason in the
//     message. A Request's Buf is not touched after Wait returns.
//   - The serving side bounds-checks every frame against the segment
//     (overflow-safe) and refuses a bad one with an error frame; the connection
//     and every other client continue. A malformed frame (bad magic or
//     version, unknown op, absurd name or payload length) closes only that
//     connection. A served connection that starts no frame for
//     Config.IdleTimeout is closed (the caller redials); once a frame's first
//     byte arrived, its header and the rest must come within IOTimeout, so a
//     peer sending half a header holds nothing for long.
//   - The accept loop backs off on temporary errors (EMFILE, ENFILE,
//     ECONNABORTED, ...; 5 ms doubling to 1 s, as net/http) and continues:
//     running out of descriptors pauses a listener, never ends it. Engine.Health
//     reports a listener backing off or stopped for good (the appliance puts
//     it in its heartbeats); Stats.AcceptErrors counts failed accepts.
//   - UnregisterSegment waits until no frame uses the segment's memory, so the
//     caller may unmap it afterwards. Close stops everything and waits.
//   - A cancelled ctx fails requests not yet handed to a connection; a frame
//     already on the wire completes or fails within Config.IOTimeout, except
//     under Do: when a Do's ctx ends, the TCP connections its frames were
//     queued on are closed (Batch.abandon), its requests fail with
//     TRANSFER_FAIL at once and are not retried, and the frames of other
//     callers on those connections are retried once on fresh ones, as after
//     any broken connection. Do returns only after its frames' readers let
//     go of its buffers. A client reading a replica with others after it
//     bounds that read by half of what is left of the lease (client
//     replicaCtx), so a box that stopped answering gives way to the next
//     replica while its grant still runs.
//   - READ and WRITE are idempotent (one-sided, same range, same bytes), so a
//     frame whose connection breaks is retried once on a fresh connection;
//     this hides pooled connections gone stale (peer restarted). A refusal
//     (error frame) is never retried.
//   - Submit writes frames on idle connections from the caller's goroutine
//     (READ frames, WRITE frames up to 64 KiB, batch frames, and the first
//     frame of the call whatever its size), hands the rest to per-connection lanes, and
//     only starts a dispatch goroutine when it would have to wait (all
//     connections busy, MaxInflightBytes reached). So a WRITE of one slice
//     has been written to the socket when Submit returns. Responses are
//     read in order straight into the callers' buffers: by a Do caller
//     whose frame, written inline, was the only one outstanding on its
//     connection (it reads on its own goroutine, as a plain TCP client
//     would), else by the connection's receive goroutine, to which the
//     reading role is handed with a kick. A caller writes inline only on a connection with nothing
//     outstanding; while a peer has fewer than ConnsPerPeer connections a
//     busy peer's frame goes to a lane, which dials another, so concurrent
//     callers spread over connections (and the server's per-connection
//     goroutines) instead of pipelining behind each other on one.
//   - Batch frames: the requests of one Submit that go to the same peer in
//     the same direction, each a memory segment's range of at most
//     SliceSize bytes, travel as batch frames (ops 4 and 5, below): one
//     frame per connection of the peer with nothing outstanding, at least
//     one (while each carries at least 64 KiB; at most 4 MiB and 1000
//     extents a frame), so a call of 128
//     small objects costs a few requests, writevs and responses instead of
//     128 of each. Per-request results, order and checksums are as for
//     single frames. Extent-source reads, larger requests and lone requests
//     go as single frames; Config.DisableBatchFrames sends every request
//     in a frame of its own.
//   - Data-plane grants: an engine given grant keys (SetGrantKeys; the
//     client SDK installs the ones the master hands its node in heartbeat
//     answers) serves a TCP request only with a valid grant
//     (internal/grant) for its segment (and bucket), op and range: frames
//     without one, forged, expired, for another extent or the other op are
//     refused with PERMISSION_DENIED naming the reason, before any memory
//     is touched or the segment even looked up; Stats.GrantRefusals counts
//     them by reason and Config.OnGrantRefused reports each. A request
//     sends Request.Grant with each of its frames (slices carry the grant
//     of the whole extent). An engine without keys serves every frame, as
//     before grants existed. The in-process local path is not checked.
//   - Request.Sum (optional) asks for the CRC32C (Castagnoli) of the
//     request's bytes. A READ's is computed while they arrive: the receive
//     goroutine checksums each socket read as it lands (still in cache),
//     slices of one request are combined in order (crc32c.Combine, zlib's
//     crc32_combine), and the local and shared-memory paths copy and
//     checksum in one pass (crc32c.CopyUpdate). A verifying reader (the
//     client's Get) so needs no second pass over the object. A WRITE's is
//     computed slice by slice just before each is sent over TCP (or each
//     chunk posted over RDMA), so the send copies bytes the checksum just
//     brought into cache: a large put (the client's late checksum, sent
//     with PutEnd) reads its value from memory once, not twice. The local
//     and shared-memory paths checksum, then copy. *Sum is written only
//     when the request succeeds.
//
// There is no package-level state: several Engines may live in one process.
//
// # Caveats
//
//   - The engine moves bytes; it does not order them. A READ overlapping a
//     WRITE in flight to the same range sees some mix of old and new bytes;
//     the master's replica states (PROCESSING until PutEnd) keep readers away.
//   - A frame stuck on a silent peer fails after IOTimeout, and again after
//     its one retry: a caller may wait up to about 2 x IOTimeout.
//   - UnregisterSegment has no context (its signature is the SDK's): it
//     waits for frames in progress, each bounded by IOTimeout.
//
// # RDMA (build tag rdma)
//
// With the tag and a device (Config.RDMADevice: "" or "auto" the first one
// libibverbs lists, a name, or "off"), every segment registered is also an
// RDMA memory region (registered before it is inserted, deregistered by
// UnregisterSegment after its wait, so no NIC touches memory its caller
// then unmaps), and the first one offered (Engine.Offer, at mount) starts
// the side channel (Config.RDMAListen, default port 0 on the data
// listener's host): package rdma's queue-pair handshake over TCP, whose
// format is specified in rdma/doc.go. Engine.Offer gives
// (side-channel address, region base, rkey) per segment; an address
// listened on a wildcard is offered without a host, which the client takes
// from the request's Endpoint. A client engine dials one RC queue pair per
// peer on first use; a failed handshake skips that peer for 5 s (its
// requests take TCP), and a queue pair that reports an error completion
// (e.g. a remote access outside the region: the NIC checks bounds) is
// closed and the request falls back to TCP, which answers with the serving
// side's own verdict. Without the tag, or without a device, RDMA is off:
// Engine.RDMAStatus says why (the appliance logs it, kvtier doctor shows
// it), Routes() does not list it, and replicas carry no RDMA offer.
//
// RDMA, like shared memory, bypasses data-plane grants and the data port's
// TLS: the NIC serves one-sided requests without this process, so an rkey
// is a capability for its whole segment for as long as the segment is
// registered, held by whoever the master handed a replica in it. So the
// master hands offers out only with grants off or when the operator
// declares the fabric trusted (master.Config.RDMATrustedFabric,
// --rdma-trusted-fabric); otherwise replicas carry none and clients use TCP.
//
// What a trusted fabric does not give up is a removal: a client holding a
// read lease (and its grant) must not read a force-removed object back.
// Every segment offered over RDMA therefore has a free table (see "Shared
// memory": the same table a mapping peer reads), registered for remote
// READ only and offered beside the segment's region (SegmentOffer
// RDMAFreesBase/RDMAFreesKey, Replica.rdma_frees_*). A client checks each
// request's grant against it as a mapping peer does (rdmaTransport.admitted,
// the same verdict as freeView.admits): a READ after its data, a WRITE
// before, with three small READs on the same queue pair, each posted after
// the one before completed: the header, the grant's slot, the header's gen
// again (the sequence lock; 8-byte words are read whole, as DMA reads
// them). The cost is three round trips of at most 128 bytes a request, not
// per slice. A request not admitted goes over TCP (Stats.RDMANotAdmitted),
// where the data port decides. An offer without a table (a node from
// before tables, or one whose table could not be registered) is not taken
// for a grant placed in a record stream (one a free could void); grants
// outside any stream, and requests without grants where none are
// enforced, still use it. A table whose magic reads in the other byte
// order (a peer of another architecture) admits nothing: TCP carries
// those requests.
//
// # Wire protocol (versions 1 and 2)
//
// A client opens TCP connections to the serving Engine and sends request
// frames; the server answers each with exactly one response frame, in the
// order the requests arrived on that connection (so a client may pipeline).
// All integers are big-endian.
//
// Request frame:
//
//	offset size field
//	0      4    magic 0x4B565451 ("KVTQ")
//	4      1    version: 1, or 2 = a grant follows the name
//	5      1    op: 1 = READ (server -> client), 2 = WRITE (client -> server)
//	6      2    N = name length, 1..255
//	8      8    request id (chosen by the client, echoed in the response;
//	            this implementation counts 1, 2, 3, ... per connection)
//	16     8    bucket (extent sources; must be 0 for memory segments)
//	24     8    offset in the segment (or in the bucket)
//	32     8    L = length, 1..67108864 (64 MiB)
//	40     N    segment or extent source name (bytes, not NUL-terminated)
//	40+N   G    version 2 only: the grant, G = 88 bytes (internal/grant's
//	            token layout); version 1: G = 0
//	40+N+G L    WRITE only: the payload
//
// Version 2 exists only for request frames (responses stay version 1; op 3
// SHM requests are version 1). A server with grant keys answers a version-1
// READ or WRITE, or a version-2 one whose grant does not verify, with
// status 25 PERMISSION_DENIED and a message "grant refused (REASON): ..."
// (REASON: missing, malformed, unknown_key, forged, expired, wrong_op,
// out_of_extent), reading and discarding a WRITE's payload. A grant whose
// first byte is 0 counts as missing (a batch frame's placeholder).
//
// Response frame:
//
//	offset size field
//	0      4    magic 0x4B565453 ("KVTS")
//	4      1    version = 1
//	5      1    op, echoed
//	6      2    status: 0 = OK, else a kverr code number (api/kvtierpb
//	            ErrorCode), e.g. 2 INVALID_PARAMS, 9 SEGMENT_NOT_FOUND,
//	            14 CHECKSUM_MISMATCH, 22 FILE_READ_FAIL
//	8      8    request id, echoed
//	16     8    P = payload length: L for an OK READ, else 0
//	24     4    M = message length, 0..1024 (0 when status is OK)
//	28     4    reserved, 0
//	32     M    error message (UTF-8): the reason, naming the segment
//	32+M   P    READ only: the payload
//
// A refused WRITE's payload is still read (and discarded) by the server so
// the stream stays in step. A server that cannot parse a request header
// closes the connection without answering; a client that gets a response it
// cannot parse, or whose id or op does not match the oldest outstanding
// request, closes the connection and fails every request outstanding on it
// with TRANSFER_FAIL.
//
// # Batch frames (ops 4 and 5)
//
// A batch frame carries K extents of memory segments in one request: op 4
// (BATCH READ) or 5 (BATCH WRITE), the same 40-byte header with its fields
// read as counts:
//
//	offset size field
//	0      4    magic 0x4B565451 ("KVTQ")
//	4      1    version: 1, or 2 = grants follow the descriptors
//	5      1    op: 4 = BATCH READ, 5 = BATCH WRITE
//	6      2    T = names in the name table, 1..255, at most K
//	8      8    request id
//	16     8    K = extents, 1..4096
//	24     8    D = descriptor section length: 2T+16K..256T+16K
//	32     8    L = payload length, the extents' lengths summed, K..64 MiB
//	40     D    descriptor section: the name table, then the extents
//	40+D   88K  version 2 only: one grant per extent, in extent order (88
//	            zero bytes for an extent without one; at most 352 KiB)
//	40+D+G L    BATCH WRITE only: the extents' bytes, concatenated in order
//
// A client sends version 2 when any request of the frame has a grant. A
// server with grant keys verifies every extent's grant before it looks up
// any name and refuses the whole frame (PERMISSION_DENIED naming the first
// extent refused) if one fails; the client then resends the extents one
// frame each, so only the requests with bad grants fail.
//
// The name table is T entries of a 1-byte length n (1..255) and n bytes of
// segment name. Each extent is 16 bytes:
//
//	0      2    name index, < T
//	2      2    reserved, 0
//	4      4    length, 1..64 MiB
//	8      8    offset in the segment
//
// The response is one ordinary response frame with op echoed: status 0 and,
// for BATCH READ, P = L payload bytes (every extent's bytes in order); or an
// error status for the whole frame with a message naming the first bad
// extent or name.
//
// A header outside these bounds closes the connection (as a malformed
// single frame does). Everything else is checked before any memory is
// touched: the descriptor section exactly D bytes, every name 1..255 bytes
// and used by some extent, every index in the table, every length in
// range, no offset+length overflow, the lengths summing to L, every name a
// registered memory segment (an extent source is refused: batch frames
// carry segments only), every extent inside its segment. A frame failing
// any check is refused whole with an error frame (INVALID_PARAMS or
// SEGMENT_NOT_FOUND) and writes nothing (a BATCH WRITE's payload is read
// and discarded, so the connection stays in step). The client then sends
// that frame's extents again one frame each, so each request gets its own
// result: a batch partly fails per request, never per frame.
//
// Compatibility: an engine that predates ops 4 and 5 closes the connection
// on one (unknown op). A client whose batch frame's connection closes
// twice (the frame is retried once, as any frame) before that peer ever
// answered a batch frame sends the frame's requests as single frames, and
// sends that peer only single frames for a minute.
// A batch frame's connection failure after the peer has answered batches
// is retried once, like a single frame.
//
// # Direct puts (op 6)
//
// A put over TCP the classic way is three round trips one after another
// (the master's PutStart, a WRITE frame, PutEnd). A direct-put frame
// carries one or many puts (key, size, CRC32C, pins, a preferred segment)
// and their bytes to a node, which places them itself: its PutHandler
// (the appliance) asks the master (PutStart on the node's own segments),
// the serving side reads each put's bytes straight from the socket into
// the extent placed for it (one of 128 KiB or more through a 256 KiB
// chunk of the connection's, moved into the extent with non-temporal
// stores), computing the CRC32C as they land, and the handler commits
// the puts whose bytes arrived with the declared checksum (PutEnd) and
// revokes the others; the answer says per put what happened. The caller
// makes one round trip; the master still decides placement and never
// carries bytes. A put ticket (internal/grant, "Put tickets") says for
// whom: with grant keys held the ticket must be signed for this node
// (Engine.SetPutHandler names it) and unexpired, else the frame is refused
// whole with PERMISSION_DENIED naming the reason (counted as a grant
// refusal), before any descriptor is parsed, the handler asked or a byte
// stored; without keys the ticket's identity is taken as declared (an
// unsigned ticket). A node without a handler refuses every frame with
// UNAVAILABLE_IN_CURRENT_STATUS. Engine.PutDirect sends one frame on a
// connection of its own pool (one frame at a time per connection: the
// serving side waits on the master inside a frame), Engine.Route says
// whether a request would cross TCP at all (only then does a direct put
// save anything). A frame of 256 KiB to 1 MiB whose values are each
// 256 KiB or more goes by reference (splice.go): the sender's pages are
// mapped into a pipe and spliced into the socket, with no copy into
// socket buffers; the caller's values must not change until the answer,
// which Engine.PutDirect waits for, and a connection that fails before
// it is reset so nothing queued is sent later. A handler that is also a
// PutStager may stage a single-put frame's put instead: the serving side
// reads its bytes whole into a buffer of the connection and checks them
// before the handler is asked anything (a mismatch is answered
// CHECKSUM_MISMATCH without a call), then hands them over (PutStaged),
// so the handler can place and commit the put in one call to its master.
//
// Request: the 40-byte header with its fields read as
//
//	offset size field
//	0      4    magic 0x4B565451 ("KVTQ")
//	4      1    version = 1
//	5      1    op = 6 (PUT)
//	6      2    T = ticket length, 1..817 (grant.MaxTicketSize)
//	8      8    request id
//	16     8    K = puts, 1..4096
//	24     8    D = descriptor section length, 21K..4 MiB
//	32     8    L = payload length, the puts' sizes summed, K..64 MiB
//	40     T    the put ticket
//	40+T   D    K descriptors, then L payload bytes (the puts' bytes in order)
//
// A descriptor is 20 bytes and two names:
//
//	0      8    size, >= 1
//	8      4    CRC32C of the put's bytes
//	12     4    soft-pin TTL, ms (0: the master's default)
//	16     1    flags: 1 soft pin, 2 hard pin (others must be 0)
//	17     1    P = preferred segment name length, 0..255
//	18     2    N = key length, 1..4096
//	20     N    key, then P bytes of preferred segment name
//
// The response is one response frame with op 6: an error status for the
// whole frame (nothing stored, nothing placed: a refused ticket, a bad
// descriptor section, no handler), or status 0 with a payload of K
// results in order, each a 2-byte kverr code (0 OK), a 2-byte message
// length M (0..1024, 0 when OK) and M bytes of message. Per put:
// OBJECT_ALREADY_EXISTS (the SDK then checks the size: first writer
// wins), NO_AVAILABLE_HANDLE ("no room here": the SDK takes the classic
// path, where the master may place it elsewhere), CHECKSUM_MISMATCH (the
// bytes that arrived are not the declared ones; revoked), or whatever the
// master answered. A header outside its bounds closes the connection;
// a frame whose connection breaks mid-payload has every placed put
// revoked.
//
// # Shared memory (same host)
//
// Loopback TCP costs two kernel copies and a stack traversal per byte; a
// client on the storage box itself needs neither. An engine whose caller
// declared memory shareable (ShareMemory(mem, memfd), what the appliance
// does with its dram.MapShared region) listens on an abstract Unix
// SOCK_SEQPACKET socket "@kvtier-shm-<random hex>" (abstract: no file to
// clean up, reachable only from the same network namespace).
//
// Discovery: the first request a client engine makes to a same-host peer
// starts, in the background, a TCP request with op 3 (SHM) on a connection
// of its own: name "shm" (ignored), bucket, offset and length 0. The server
// answers op 3 with status 0 and the socket address as payload (at most 107
// bytes, starting with "@"), or with an error frame (INVALID_PARAMS "this
// node shares no memory", not counted as a served error). An engine that
// predates op 3 closes the connection (unknown op). Any failure leaves the
// client on TCP and is counted (Stats.SharedFailures); it asks again after
// 1 s, doubling to 1 min while it keeps failing. Requests go over TCP
// until the mapping is complete.
//
// The client connects to the socket. The server admits only peers running
// as its own user or as root (SO_PEERCRED; a mapped segment is readable
// and writable whole) and refuses others by closing (Stats.SharedRefused).
// A peer admitted here can read and write every shared segment whole: it
// trusts the host (anything running as the appliance's user, or root,
// could read its memory anyway). This package's client holds itself to
// the data port's grant decisions all the same, through each segment's
// free table (below), so a removed object never reads back over shared
// memory when it would not over TCP.
// The server then sends one packet per shared segment, a SYNCED packet,
// and from then on a packet per segment registered or unregistered, in
// order:
//
//	offset size field
//	0      4    magic 0x4B56544D ("KVTM")
//	4      1    version = 2 (1 is still read: no free table)
//	5      1    kind: 1 = SEGMENT (its memfd and its free table's memfd
//	            attached with SCM_RIGHTS, in that order; version 1: the
//	            segment's only), 2 = GONE, 3 = SYNCED
//	6      2    N = name length (1..255; 0 for SYNCED)
//	8      8    segment size in bytes (SEGMENT)
//	16     8    offset of the segment's first byte in the memfd (SEGMENT)
//	24     N    segment name
//
// The client validates every packet (magic, version, kind, lengths, two
// descriptors with a version-2 SEGMENT, one with a version-1 one and none
// otherwise, the range inside the file's size, the free table's size and
// header) and drops the whole connection on a bad one. It maps each
// segment MAP_SHARED|MAP_POPULATE (2 MiB-aligned, so hugetlb memfds work)
// and its free table read-only, and closes the descriptors. The client
// never sends anything; the server forgets it when it hangs up. A client
// of version 1 drops a version-2 server's connection and stays on TCP.
//
// Free tables: the data port checks every frame's grant against the
// engine's revocations (internal/grant, "Early revocation"): a grant whose
// extent the master freed after signing it is refused. A copy through a
// mapped segment never passes the data port, so the serving engine
// publishes, per shared segment, a memfd mirroring those revocations
// (grant.Publisher, written under the revocation table's lock, so before
// the free is acknowledged to the master, and a removal returns only
// after that), in host byte order (peers are on the same host):
//
//	offset size field
//	0      8    magic 0x3145455246545648
//	8      8    gen: a sequence lock over outbox, keys and a reset of the
//	            slots (odd while they change)
//	16     8    outbox: the master's record stream followed (0: none;
//	            grants are then not revoked early, as at the data port)
//	24     8    granule shift = 12 (4 KiB)
//	32     8    N = slots = segment size / 4 KiB, rounded up
//	40     8    key count K (0: grants not enforced), at most 4
//	48     32   the key IDs accepted (the first K of 4 slots of 8 bytes)
//	128    8*N  per granule, the highest seq of a free applied to an
//	            extent starting in it (0 after a reset)
//
// The file is that size rounded up to the page size. A new master's
// records (grant.Revocations.Follow) and a disjoint set of keys
// (SetGrantKeys: the master mounted the node's segments anew) reset the
// slots; a segment registered again starts from the revocations held
// under its name. Before a shared-memory READ is trusted (after its
// copy) or a WRITE made (before it), the client checks the request's grant
// as the data port would (freeView.admits): its key among those accepted,
// not expired, and, when both the table and the grant follow one
// outbox, no free of a later seq than the grant's Seq in the slot of the
// grant's extent. Missing a grant where keys are enforced, a grant placed
// in another outbox, or a table changing just then, it does not decide.
// A request not admitted fails over to TCP (Stats.SharedNotAdmitted),
// where the data port refuses it or serves it: extents that start in one
// granule (an object under 4 KiB and the one after it) share a slot, so
// a free of one sends the other's older grants there (in `kvtier bench --op mixed
// --size 1KiB,64KiB` at a full cache, 4 reads of the 16,600 operations of
// the 64 KiB run went that way). The
// data port's wait for records not yet applied is not mirrored: a READ of
// a committed object needs none, and a WRITE's bytes are checked by its
// reader's CRC32C.
//
// Safety: a copy holds its segment's mapping (a read lock) so a GONE
// packet or the peer's death never unmaps memory under it. When the peer
// process dies its socket closes, the client drops every mapping of it and
// requests go to TCP (which then fails with TRANSFER_FAIL). A WRITE whose
// copy overlapped the peer's death fails with TRANSFER_FAIL too, so a
// writer never believes bytes landed in memory that nobody serves. A READ
// racing a concurrent WRITE sees a mix, as over TCP; readers verify the
// CRC32C (the client SDK always does).
//
// # Performance
//
// bench_test.go measures every size beside a baseline in the same run,
// interleaving the two operation by operation (alternating which goes first)
// so both see the same machine load: TCP against plain Go TCP moving the
// same bytes between the same two processes (the server is the re-executed
// test binary; the baseline sends a 9-byte command and reads or writes the
// bytes, then a 1-byte ack for writes), and the local path against copy().
//
//	go test -run '^$' -bench . -benchtime 1s -count 3 ./internal/transfer/
//
// Medians of 3 on the 2-core VM at load average 8-10 (other builds running),
// default Config (4 connections per peer, 1 MiB slices, pipeline depth 4):
//
//	                 kvtier GB/s  baseline GB/s  ratio
//	TCP  READ  64KiB     1.59        2.11 raw     0.75
//	TCP  READ   1MiB     1.83        2.14 raw     0.86
//	TCP  READ  16MiB     1.22        1.08 raw     0.97
//	TCP  WRITE 64KiB     1.38        1.64 raw     0.81
//	TCP  WRITE  1MiB     1.89        1.25 raw     1.51
//	TCP  WRITE 16MiB     1.00        1.02 raw     0.92
//	local READ  64KiB   11.9        12.8 copy()   0.94
//	local READ   1MiB   15.9        14.5 copy()   1.04
//	local READ  16MiB    4.5         4.9 copy()   0.92
//	local WRITE 64KiB    5.6         6.9 copy()   0.81-1.28 (noisy)
//	local WRITE  1MiB    7.5         7.4 copy()   1.01
//	local WRITE 16MiB    4.0         4.1 copy()   0.99
//
// BenchmarkShared is BenchmarkTCP with the server process sharing its
// segment (a memfd): the engine copies through the mapping while the
// baseline still crosses loopback TCP between the same two processes. Two
// runs on a quiet VM (16 MiB segment, so mostly cache-resident):
//
//	                 kvtier GB/s  raw TCP GB/s  ratio
//	shm  READ  64KiB   21.9-22.4     0.9-1.4    15-23
//	shm  READ   1MiB   16.4-16.8     2.2-2.5    6.5-7.3
//	shm  READ  16MiB   11.7          2.6-3.0    3.9-4.5
//	shm  WRITE  1MiB   14.4-14.5     2.0        7.0
//	shm  WRITE 16MiB   11.7-12.0     2.3-2.4    4.9-5.2
//
// Single runs on this loaded machine scatter by about ±25%, hence the
// medians. What got the TCP path there: callers write READ frames (and the
// first frame of each Submit) on an idle connection themselves instead of
// handing them to a lane goroutine, and the receive goroutine sits in Read
// with a deadline armed only while requests are outstanding (one wake-up per
// response instead of two); together they lifted READ 1 MiB from about
// 0.4-0.7 to 0.8-0.9 of raw. Explicit socket buffer sizes (SocketBuffer)
// and 1-4 connections per peer made no difference beyond the noise, so the
// kernel's autotuning stays the default. Below 1 MiB a request paid a fixed
// cost of a few microseconds (one more goroutine wake-up than the raw
// client: the receive goroutine), visible at 64 KiB; since a Do caller
// alone on its connection reads its own response (session 14), READ 64
// KiB went from 0.62-0.67 to 0.77-0.78 of raw and WRITE 64 KiB from
// 0.75-0.76 to 0.83 (BenchmarkTCP, two runs each).
//
// BenchmarkTCPBatch sends one Submit of many small requests from 1 or 4
// callers beside the same callers moving the same messages over raw Go TCP
// (a round trip per message, one connection each) and beside the engine
// with batch frames off (DisableBatchFrames: a frame per request, as
// before). Ranges over several runs on the loaded 2-core VM (00:10-00:30
// UTC, 2026-12-02):
//
//	                        batch frames / raw   batch / per-key frames
//	WRITE  4 KiB x 128         3.3 - 7.5            3.5 - 4.5
//	READ   4 KiB x 128         1.5 - 5.0            1.6 - 4.1
//	WRITE 16 KiB x 64          1.6                  1.6 - 1.9
//	READ  16 KiB x 64          1.2 - 1.3            1.2 - 1.5
//	WRITE 64 KiB x 16          0.55 - 1.2           0.8 - 1.2
//	READ  64 KiB x 16          0.55 - 1.0           0.8 - 1.3
//
// Below 64 KiB a frame per request is dominated by its fixed cost (a
// wake-up on each side, a request and a response); a batch frame pays it
// once per connection. At 64 KiB the fixed cost is already small beside
// the bytes and batch and per-key frames are within the noise. Through
// the client (BatchPut, 4 callers, 128 x 4 KiB, `kvtier bench`) syscalls
// per call fell from 461 to 38 in the caller and from 681 to 49 in the
// appliance, context switches from 36 to 10 and 36 to 19 (strace -c -f,
// perf stat; see README).
//
// The router (one Transport interface, per-transport peers, fallback)
// replaced hand dispatch at no measurable cost: the benchmarks above
// (BenchmarkTCP, BenchmarkShared, BenchmarkLocal, BenchmarkTCPBatch,
// -benchtime 2x) run 10 times alternating with a test binary of the engine
// before it, on this VM at load average 6-8 (2026-12-02 02:50 UTC): time
// per op new/old geomean 0.95 over 30 benchmarks (each the median of 10),
// the in-run kvtier/baseline ratio new/old geomean 1.01; single benchmarks
// scatter from 0.73 to 1.52 both ways, the machine's noise.
//
// # Imports
//
// transfer is a mechanism: the client SDK and the appliance import it. It
// imports only kverr, internal/crc32c, internal/memcopy, internal/grant and
// rdma (the verbs the RDMA transport adapts; nothing outside this package
// and the appliance may import a transport implementation, a rule
// tests/layering_test.go enforces).
package transfer
