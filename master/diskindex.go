package master

import (
	"context"
	"fmt"

	"github.com/kvtier/kvtier/kverr"
)

// The disk index: each shard maps (node, bucket) to the composite keys of
// its objects holding a LOCAL_DISK replica there, so that DropBucket (an
// appliance evicting a bucket) and the loss or restart of a node visit
// only the objects concerned instead of every object of the master (a full
// scan was 3.7 % of the master's CPU in a full-cache benchmark, and grew
// with the object count). It is kept under the shard lock on every path
// that adds, moves or drops a disk replica (addDiskReplicaLocked,
// registerDisk, dropDiskLocked, unindexDiskReplicasLocked before an object's
// replicas are discarded) and CheckInvariants compares it with a scan.
//
// An object holds at most one LOCAL_DISK replica per node, so a key is in
// at most one bucket set of a node. The key strings are the ones sh.objs
// and sh.mem hold where the caller has them (canonicalKeyLocked), so an
// entry costs a string header and the map's slot, not a copy of the key.
//
// # Restarts
//
// A restarted appliance (a new incarnation, identity.go) re-registers what
// its SSD tier recovered (RegisterDiskObjects, the last call marked Last).
// Until it has, its disk replicas stay in the objects, unconfirmed: not
// handed to readers (GetReplicaList answers UNAVAILABLE_IN_CURRENT_STATUS
// naming the node when nothing else is left, Exist says no), but the
// objects do not vanish, and a Remove of one reaches the node, whose
// re-registration of the copy is then refused. An offload the old
// incarnation was writing (dispatched, never reported) may have left a
// durable copy the master does not know: it becomes an unconfirmed
// placeholder replica (bucket noBucket) for the same reasons. While the
// node registers, every Remove also queues the key's removal for it (as
// for a gone node), since its SSD may hold copies the master cannot name.
// The registration's end (or DiskRegisterWait without it) drops the
// replicas still unconfirmed: registered copies are kept, missing or
// quarantined ones are gone, and nothing is half-present. A node that
// comes back after it was declared gone (its replicas were dropped then)
// registers the same way.
//
// # Caveats
//
//   - A put of a key whose only copies are unconfirmed answers "already
//     stored"; if the box then does not register the copy (quarantined),
//     the object disappears at the end of the registration (an event
//     counts such objects).
//   - A Remove of a key the master does not hold (its only copy was on a
//     box declared gone) answers OBJECT_NOT_FOUND and queues nothing: the
//     box's return may bring the key back, as before. The keys a gone box
//     held stay in sh.gone (a string header and a map slot each) until it
//     returns and ends its registration, forever for a box that never
//     returns.

// diskRef names one SSD bucket of one node.
type diskRef struct {
	node   *client
	bucket uint64
}

// noBucket is the bucket of a placeholder replica: a copy an offload may
// have written before its appliance died, location unknown.
const noBucket = ^uint64(0)

// canonicalKeyLocked returns the copy of composite key k that the shard
// already holds for o (its DRAM index entry), or k.
func canonicalKeyLocked(sh *shard, k string, o *object) string {
	if o.memPos > 0 && int(o.memPos) <= len(sh.mem) && sh.mem[o.memPos-1].o == o {
		return sh.mem[o.memPos-1].ck
	}
	return k
}

func indexDiskLocked(sh *shard, k string, node *client, bucket uint64) {
	ref := diskRef{node, bucket}
	set := sh.disk[ref]
	if set == nil {
		set = make(map[string]struct{})
		sh.disk[ref] = set
	}
	set[k] = struct{}{}
}

func unindexDiskLocked(sh *shard, k string, node *client, bucket uint64) {
	ref := diskRef{node, bucket}
	if set := sh.disk[ref]; set != nil {
		delete(set, k)
		if len(set) == 0 {
			delete(sh.disk, ref)
		}
	}
}

// unindexDiskReplicasLocked takes o's disk replicas out of the index,
// before its replicas are discarded (remove, revoke, take-over).
func unindexDiskReplicasLocked(sh *shard, k string, o *object) {
	for i := range o.replicas {
		if r := &o.replicas[i]; r.typ == LocalDisk {
			unindexDiskLocked(sh, k, r.disk, r.bucket)
		}
	}
}

// addDiskReplicaLocked adds (or moves) c's LOCAL_DISK replica of o, the
// object under composite key k; a replica that was unconfirmed is
// confirmed. sh (k's shard) must be locked.
func (m *Master) addDiskReplicaLocked(sh *shard, k string, o *object, c *client, bucket, off, length uint64) {
	for i := range o.replicas {
		r := &o.replicas[i]
		if r.typ == LocalDisk && r.disk == c {
			if r.bucket != bucket {
				unindexDiskLocked(sh, k, c, r.bucket)
				indexDiskLocked(sh, canonicalKeyLocked(sh, k, o), c, bucket)
			}
			r.bucket, r.offset, r.length, r.state, r.unconfirmed = bucket, off, length, Complete, false
			return
		}
	}
	o.replicas = append(o.replicas, replica{disk: c, bucket: bucket, offset: off, length: length, typ: LocalDisk, state: Complete})
	indexDiskLocked(sh, canonicalKeyLocked(sh, k, o), c, bucket)
}

// dropMode says which of a node's LOCAL_DISK replicas dropDisk drops.
type dropMode uint8

const (
	dropBucket      dropMode = iota // those of one bucket (DropBucket)
	dropAll                         // all (a node without an SSD tier any more)
	dropUnconfirmed                 // the unconfirmed ones (end of a re-registration)
	dropGone                        // all, remembering their keys (the node is gone)
)

// dropDisk drops node c's LOCAL_DISK replicas that mode names. Objects
// left with no replica disappear. It visits only the objects the index
// names, and returns how many replicas it dropped.
func (m *Master) dropDisk(c *client, bucket uint64, mode dropMode) int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		if mode == dropBucket {
			n += m.dropDiskLocked(sh, diskRef{c, bucket}, mode)
		} else {
			for ref := range sh.disk {
				if ref.node == c {
					n += m.dropDiskLocked(sh, ref, mode)
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// dropDiskLocked drops the replicas of ref in sh (see dropDisk).
func (m *Master) dropDiskLocked(sh *shard, ref diskRef, mode dropMode) int {
	set := sh.disk[ref]
	n := 0
	for k := range set {
		o := sh.objs[k]
		j := -1
		for i := 0; o != nil && i < len(o.replicas); i++ {
			r := &o.replicas[i]
			if r.typ == LocalDisk && r.disk == ref.node && r.bucket == ref.bucket {
				j = i
				break
			}
		}
		if j < 0 { // cannot happen while the index is kept; harmless
			delete(set, k)
			continue
		}
		if mode == dropUnconfirmed && !o.replicas[j].unconfirmed {
			continue
		}
		delete(set, k)
		n++
		if mode == dropGone && ref.bucket != noBucket {
			rememberGoneLocked(sh, ref.node, k)
		}
		last := len(o.replicas) - 1
		copy(o.replicas[j:], o.replicas[j+1:]) // order kept: readers rank replicas stably
		o.replicas[last] = replica{}
		o.replicas = o.replicas[:last]
		if last == 0 {
			m.dropObjectLocked(sh, k, o)
		}
	}
	if len(set) == 0 {
		delete(sh.disk, ref)
	}
	return n
}

// rememberGoneLocked records that node's copy of k was dropped when the
// node went gone: when it comes back, its re-registration may bring the
// object back (see mayCreateLocked).
func rememberGoneLocked(sh *shard, node *client, k string) {
	set := sh.gone[node]
	if set == nil {
		set = make(map[string]struct{})
		sh.gone[node] = set
	}
	set[k] = struct{}{}
}

// forgetGoneLocked forgets k in every gone set of sh (k was removed: no
// returning node may bring it back).
func forgetGoneLocked(sh *shard, k string) {
	for node, set := range sh.gone {
		delete(set, k)
		if len(set) == 0 {
			delete(sh.gone, node)
		}
	}
}

// mayCreateLocked says whether c's registration of a copy of k, an object
// the master does not hold, may create it. A master that knows c's past (c
// is re-registering after a restart or a return from GONE) holds every
// object c has a copy of that it acknowledged, unconfirmed, or dropped
// when c went gone (remembered in sh.gone): any other copy is one it never
// acknowledged or whose object was removed since (an offload written after
// the master forgot the task, say), and must not come back. A master that
// does not know c's past (it restarted; c's first contact) takes every
// copy: its table is what the appliances report. On success the gone entry
// is used up.
func mayCreateLocked(sh *shard, c *client, k string) bool {
	if !c.isRegistering() {
		return true
	}
	set := sh.gone[c]
	if _, ok := set[k]; !ok {
		return false
	}
	delete(set, k)
	if len(set) == 0 {
		delete(sh.gone, c)
	}
	return true
}

// markRestartedLocked makes c's disk replicas in sh unconfirmed.
func markRestartedLocked(sh *shard, c *client) {
	for ref, set := range sh.disk {
		if ref.node != c {
			continue
		}
		for k := range set {
			o := sh.objs[k]
			if o == nil {
				continue
			}
			for i := range o.replicas {
				if r := &o.replicas[i]; r.typ == LocalDisk && r.disk == c {
					r.unconfirmed = true
				}
			}
		}
	}
}

// beginDiskRegistration starts c's re-registration: until it ends, its
// disk replicas (made unconfirmed by the caller when it had any) are not
// served, and removals are queued for it as for a gone node.
func (m *Master) beginDiskRegistration(c *client) {
	c.registering.Store(m.now().Add(m.cfg.DiskRegisterWait).UnixNano())
}

// registering reports whether c has not finished re-registering its SSD
// copies after a restart or a return from GONE.
func (c *client) isRegistering() bool { return c.registering.Load() != 0 }

// EndDiskRegistration records that clientID re-registered everything its
// SSD tier holds (RegisterDiskObjects with Last): its disk replicas still
// unconfirmed are dropped (objects left with none disappear), and removals
// stop being queued for it beyond the copies the master knows.
func (m *Master) EndDiskRegistration(ctx context.Context, clientID string) error {
	c := m.clients.get(clientID)
	if c == nil || ClientState(c.state.Load()) == ClientGone {
		return kverr.New(kverr.ClientNotFound, "", "end disk registration: unknown client %q", clientID)
	}
	m.endDiskRegistration(c, "registered")
	return nil
}

// endDiskRegistration ends c's registration, if one runs (how: for the
// event).
func (m *Master) endDiskRegistration(c *client, how string) {
	if c.registering.Swap(0) == 0 {
		return
	}
	before := m.nObjects.Load()
	n := m.dropDisk(c, 0, dropUnconfirmed)
	m.forEachShard(func(sh *shard) { delete(sh.gone, c) }) // copies it did not bring back are forgotten
	if n == 0 {
		return
	}
	msg := fmt.Sprintf("SSD copies %s: %d copies the previous incarnation held were not re-registered and are dropped", how, n)
	if lost := before - m.nObjects.Load(); lost > 0 {
		msg += fmt.Sprintf("; %d objects had no other replica and are gone", lost)
	}
	m.publish(Event{Kind: "client", Node: c.id, Message: msg})
}

// expireRegistrations ends the registrations that ran past
// DiskRegisterWait (an appliance that never says it is done).
func (m *Master) expireRegistrations(now int64) {
	for _, c := range m.clients.list() {
		if d := c.registering.Load(); d != 0 && now >= d {
			m.endDiskRegistration(c, "not re-registered within the registration wait")
		}
	}
}
