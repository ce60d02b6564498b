// Package grant owns kvtier's data-plane grants: short capabilities the
// master signs for one replica extent and the appliance verifies before a
// byte moves over its data port; and put tickets, which let a client put
// through an appliance's data port in one trip ("Put tickets").
//
// # Contract
//
// A grant is an HMAC-SHA256, keyed by a per-appliance secret, over
// {segment, bucket, offset, length, op (read or write), client session,
// expiry}. The master generates each appliance's secret (crypto/rand) when
// the appliance mounts, hands it over the control channel, rotates it and
// signs every replica location it hands out with the newest secret the
// appliance holds. The appliance's transfer engine verifies (Keyring.Verify)
// every request against the keys it holds (current and previous, so a
// rotation never refuses a grant in flight): the MAC in constant time
// (hmac.Equal), the expiry, the op, and that the requested range lies inside
// the signed extent (a request may be a slice of it). Any failure is a
// *Refusal naming its Reason; nothing else about the key leaks.
//
// The segment name is covered by the MAC but not carried in the token: the
// verifier supplies the segment the request names, so a grant for another
// segment fails as a forgery.
//
// The session is a 16-byte value naming whom the grant was issued to: with
// credentials, the authenticated credential (SessionOfPrincipal of
// auth.Principal.ID, the same for every client ID that credential uses);
// open, the client ID the call named (SessionOf). It is signed, so it
// cannot be altered, but the data port does not check it: the appliance
// holds no credential table and its peers prove nothing on connecting, and
// the session travels in the clear inside the token, so a peer could not
// prove it by merely naming it. A grant is therefore a bearer capability
// for its extent and op until its expiry: anyone who obtains it (it
// travels only over the control channel and the data connection, both of
// which TLS can protect) can use it within those bounds. The session
// serves attribution (who was handed the grant a refused or suspicious
// request carried). Binding use to the session would need a proof of
// possession the appliance can check without the credential table: for
// instance a per-session key HMAC(node secret, session) that the master
// hands the client beside the grant over the authenticated control
// channel and the client uses to answer a per-connection challenge of the
// appliance, which derives the same key from its own secret. That is a
// wire change (a proto field and a transfer handshake) not made yet.
//
// # Early revocation
//
// A grant's expiry alone would let a stale grant work after the master
// freed its extent (a removal, an eviction, a taken-over put) and gave the
// space to another put: its holder could overwrite someone else's object
// (or read it) until the expiry. So a grant of a MEMORY replica also
// carries its place in the master's stream of DRAM directory records to
// the node (Mark: the master's outbox ID and the seq of the last free
// record queued for the segment when it was signed, read under the lock
// that orders it against the replica's own free), and the node's transfer
// engine keeps a Revocations table fed from the free records it applies:
// a free (segment, offset) at seq F voids every grant for that extent
// placed before F. The master queues the free before the space returns to
// its allocator and the node applies records in order, so the stale grant
// is void before the space's next put is even placed; that put's grants
// are placed at or after F, and the node serves a grant only once it has
// applied the records up to its place (waiting up to
// transfer.RevocationWait for them, then refusing), which covers the race
// of a new put's bytes arriving before the free record (the data path and
// the records stream are separate connections). Refusals say "revoked".
// A free record carries the latest expiry of any grant signed for it
// (now + the longest grant lifetime: put deadline, lease, offload task),
// after which its entry is dropped; past DefaultMaxRevocations entries
// the oldest is dropped and every grant placed before it refused.
//
// Shared memory and RDMA: a same-host peer copying through a mapped
// segment, or a peer reading it with one-sided RDMA, never passes the data
// port; the node's transfer engine mirrors the table for such peers (a
// Publisher: internal/transfer "Free tables", mapped read-only or
// registered for remote READ only), and its client sends a request over
// TCP when the mirror does not admit its grant.
//
// Limits: nodes that take no records (a GPU client's own segments, or an
// appliance started with --no-dram-directory) keep the expiry-only
// behaviour, and so do extent sources (SSD buckets, served for READ
// only: a stale read grant there can read a reused bucket until its
// lease ends, but nothing can be overwritten). A write grant is
// not revoked at PutEnd: until the put's deadline its holder can still
// rewrite its own committed object (readers then see a CRC32C mismatch;
// no one else's space is at stake). A node declared gone gets new keys
// (the frees of its dropped replicas reach no directory), and an engine
// whose keys are all replaced clears its table. Records an appliance
// missed because its queue overflowed (the master tells it to reset its
// directory) revoke nothing: their grants live until expiry.
// Revocation is checked when a frame's header is verified, so a frame
// verified just before may still be moving bytes: the data port counts
// frames in flight (Revocations.Enter/Exit) and the appliance, after
// applying a batch with frees, waits for the frames that entered before
// (Drain) before it acknowledges the batch and serves grants placed after
// it. The wait is bounded (transfer.RevocationWait, 2 s): a peer that
// trickles one frame's bytes longer is not waited for, and can land them
// until the data port's per-frame I/O timeout (transfer.Config.IOTimeout,
// 30 s); the appliance logs it.
//
// # Token layout (version 2, 104 bytes, big-endian)
//
//	offset size field
//	0      1    version = 2
//	1      1    op: 1 = READ, 2 = WRITE
//	2      2    reserved, 0
//	4      4    key ID (which appliance secret signed it)
//	8      8    bucket (extent sources; 0 for memory segments)
//	16     8    offset of the extent
//	24     8    length of the extent, >= 1
//	32     8    expiry, unix nanoseconds
//	40     16   client session
//	56     8    outbox: the signing master's DRAM record outbox, 0: none
//	64     8    seq of the last free record queued for the segment
//	72     32   HMAC-SHA256 over "kvtier-grant-v2", bytes 0..71, a 1-byte
//	            segment-name length and the segment name
//
// Version 1 (88 bytes, no outbox and seq) is no longer accepted: the
// frame formats carry Size bytes, so both ends of a data connection
// must be of one version anyway.
//
// Unsigned grants: a master without grants (--data-grants=false) still
// hands out, for each MEMORY replica, a grant with key ID 0 and a zero MAC
// (Unsigned) placed in its record stream like a signed one. It opens
// nothing (a node holding keys refuses it: unknown_key; one without keys
// serves every request anyway), but the node checks its mark against its
// Revocations, so a client's cached read lease does not read back a
// replica the master freed (a forced removal) in the open configuration
// either.
//
// # Put tickets
//
// A direct put (internal/transfer doc.go, "Direct puts") carries a key,
// its checksum and its bytes to a node's data port in one frame, and the
// node places it with the master for the client. The data port cannot
// check the client's credential, so the client presents a put ticket: an
// HMAC-SHA256, keyed by the same per-node secret as grants, over {op PUT,
// node, tenant, client ID, expiry}, which the master signs (PutTicket)
// only after authorizing the caller as it authorizes PutStart (role,
// tenant confinement, client ID bound to the caller's credential). The
// node verifies it (VerifyTicket: layout, MAC in constant time, node,
// expiry; refusals as for grants) before it reads the bytes or asks the
// master anything, and passes the ticket with its PutStart and PutEnd,
// where the master verifies it again with the node's keys: the tenant and
// writer of the object are the ticket's, never a frame's. Like a grant, a
// ticket is a bearer capability until its expiry (minutes; clients renew
// it in the background at half its life): whoever holds it can put new
// objects as that client through that node, nothing else (no read, no
// overwrite: puts are write-once). Without grants (--data-grants=false)
// the client declares its identity in an unsigned ticket (key ID 0, no
// MAC), accepted exactly as an open master accepts the identity a call
// names; a node holding keys refuses unsigned tickets.
//
// Early revocation covers direct puts too: the node places the put, so no
// write grant exists for it, but a stale grant for the extent's previous
// occupant could still be writing there. The node writes the put's bytes
// only after it applied the DRAM records up to the last free record of
// the put's segment queued before the placement (PutStart's
// dram_free_seq: the previous occupant's free among them, which drains
// that grant's frames; almost always applied long before). With a master
// that does not say (dram_free_seq 0), it counts them only after it
// applied the records up to the put's commit record: before reading them
// for a frame above 128 KiB, or by checking them again afterwards for a
// smaller one.
//
// Layout (big-endian):
//
//	offset size field
//	0      1    version = 1
//	1      1    op = 3 (PUT)
//	2      2    reserved, 0
//	4      4    key ID (0: unsigned)
//	8      8    expiry, unix nanoseconds (0 when unsigned)
//	16     1    N = node name length, 1..255
//	17     1    T = tenant length, 1..255
//	18     1    C = client ID length, 1..255
//	19     1    reserved, 0
//	20     N    node name, then T tenant, then C client ID
//	20+N+T+C 32 HMAC-SHA256 over "kvtier-ticket-v1" and bytes 0..20+N+T+C
//	            (zero when unsigned)
//
// # Imports
//
// grant imports only the standard library: the master (signing) and the
// transfer engine (verifying) both import it.
package grant
