// Package ha elects one kvtier master among several through etcd: a single
// master is the default; with etcd (kvtier master --etcd ENDPOINTS) it runs
// as one leader plus standbys. The package owns only the election; it knows
// nothing of the master's state. It may be imported by cmd/kvtier (to gate
// the master's gRPC listener), by the client SDK and by tools (Leader, to
// find the leader's address). It imports no other kvtier package except
// kverr and internal/clock.
//
// # Contract
//
//   - Campaign blocks until this master is the leader, then returns a
//     Leadership. It returns earlier only for a bad Config
//     (kverr.InvalidParams, nothing contacted), for etcd unreachable at the
//     start (kverr.RPCFail, naming the endpoints, after Config.DialTimeout),
//     or when ctx ends (the ctx error, wrapped; the standby's key is removed).
//     Campaign's ctx bounds only the wait: a Leadership outlives it.
//   - While waiting, a standby survives etcd outages: if its session lease
//     expires it takes a new one and campaigns again (at the back of the
//     queue).
//   - Leadership.Lost is closed as soon as leadership may have ended: the
//     lease keepalive ended or the lease was revoked, the leader key was
//     deleted or replaced, the watch on it broke (including etcd losing its
//     own raft leader), Resign/Close was called, or no lease refresh
//     succeeded for 2/3 of the TTL. The caller must stop serving at once;
//     a Leadership is never regained — campaign again for a new one.
//   - The early-loss rule (2/3 TTL, timed with Config.Clock) makes the old
//     leader stop before etcd expires its lease, which is what lets a standby
//     win; the remaining third of the TTL covers network delay. It assumes
//     the two hosts' clocks run at about the same rate, not that they agree.
//     Epoch (the leader key's create revision, strictly increasing per
//     election) is available to fence a deposed leader where that matters.
//   - Resign deletes the leader key (a standby takes over at once, without
//     waiting for the TTL) and revokes the lease. Close = Resign bounded by
//     DialTimeout + closing the etcd client. Both are idempotent.
//   - Leader(ctx, endpoints, prefix) returns the current leader's advertised
//     address, or "" when no master is elected.
//
// # Keys in etcd
//
// Prefix defaults to "/kvtier/master". Each candidate (leader or standby)
// holds one key, attached to its session lease (TTL Config.SessionTTL,
// default 5 s, whole seconds, raised by etcd to its minimum if smaller):
//
//	<Prefix>/<lease ID in lower-case hex>  =  <Advertise>   (e.g. "10.0.0.5:7000")
//
// The value is the raw Advertise string, no framing. The candidate whose key
// has the lowest create revision is the leader (the go.etcd.io/etcd/client/v3
// concurrency election recipe); the others wait for every older key to be
// deleted. Leader reads the key under "<Prefix>/" with the lowest create
// revision. Nothing else is stored.
//
// # Failover
//
// Standbys block in Campaign and do not listen on the master gRPC port; only
// the elected master listens. Clients and appliances are given several
// master addresses and connect to whichever accepts (or ask Leader); when
// the connection fails they retry the list. When the leader dies, etcd
// expires its lease within SessionTTL (at once if it resigned), the oldest
// standby's Campaign returns, and it starts listening. The new leader starts
// empty: its state is refilled by heartbeats — clients re-announce their
// mounted segments, and appliances re-register their SSD objects and report
// their DRAM directories when the master answers a heartbeat with
// known=false (package master, "Rebuild"), so every put acknowledged by the
// old leader is readable again with the same bytes. The leader's Epoch is
// reported with every PutEnd answer (kvtierpb.Empty.leader_epoch); a leader
// that loses its leadership refuses mutations (master.Fence) and stops
// listening at once. Measured on the shared 2-core VM with a 2 s TTL
// (kvtier master --etcd-session-ttl 2s), SIGKILL of the leader under a put
// load to the first put and get through the new leader: 2.0-3.9 s, no
// acknowledged object lost (tests/ha_rebuild_test.go,
// TestHAFailoverUnderLoadDRAM); etcd SIGSTOPped: the leader stopped serving
// 0.8 s later (TestHADeposedLeaderStops).
//
// # Caveats
//
//   - Between the old leader's death and the new leader's election (up to
//     SessionTTL plus a round trip) there is no master; clients see
//     connection errors and retry.
//   - A leader partitioned from etcd but not from clients keeps serving for
//     at most 2/3 of the TTL after its last refresh.
//   - Close with etcd down waits DialTimeout for the resign before giving up;
//     the lease then expires on its own.
package ha
