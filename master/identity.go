package master

import (
	"context"
	"slices"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// Identity names one start of a node (doc.go, "Appliance identity").
type Identity struct {
	// Incarnation is random per process start; "" means the node does not
	// take part (GPU nodes, CLI calls): no restart detection.
	Incarnation string
	// DiskID identifies the node's SSD directory (persisted there); "" =
	// none. Only one process can hold an SSD directory (flock), so a new
	// incarnation with the same DiskID proves the old one is gone.
	DiskID string
}

// MountSegmentAs is MountSegment from the given start of clientID: a new
// incarnation of a known name is a restart (see admit).
func (m *Master) MountSegmentAs(ctx context.Context, clientID string, id Identity, seg Segment) error {
	return m.mountAs(clientID, id, seg)
}

// UnmountSegmentAs is UnmountSegment from incarnation inc of clientID: it
// is refused (ILLEGAL_CLIENT) when another incarnation holds the name.
func (m *Master) UnmountSegmentAs(ctx context.Context, clientID, inc, name string, grace time.Duration) error {
	if c := m.clients.get(clientID); c != nil && inc != "" {
		c.mu.Lock()
		cur := c.ident.Incarnation
		c.mu.Unlock()
		if cur != "" && cur != inc {
			return kverr.New(kverr.IllegalClient, "", "unmount %s: the name %q is held by incarnation %s, not %s", name, clientID, cur, inc)
		}
	}
	return m.UnmountSegment(ctx, clientID, name, grace)
}

func (m *Master) mountAs(clientID string, id Identity, seg Segment) error {
	if c := m.clients.get(clientID); c != nil && clientID != "" {
		if err := m.admit(c, id, seg.Endpoint, m.now().UnixNano()); err != nil {
			return err
		}
	}
	if err := m.mount(clientID, seg, true); err != nil {
		return err
	}
	if c := m.clients.get(clientID); c != nil {
		return m.admit(c, id, seg.Endpoint, m.now().UnixNano()) // adopts the identity of a new client
	}
	return nil
}

// admit checks a contact (heartbeat or mount) from incarnation id of node
// c at endpoint, before the contact counts as a sign of life.
//
//   - The first incarnation the master sees of a name (at its own start,
//     too) is adopted.
//   - The same incarnation: nothing to do.
//   - A new incarnation takes over (a restart, see restartNode) when the
//     old one is provably or probably dead: same SSD directory (DiskID),
//     same data address, the old one not LIVE, or silent for at least
//     RestartTakeover (default 3 s, three heartbeat intervals).
//   - A contact of the new incarnation that arrives while another of its
//     contacts runs the restart (its first heartbeat races its first mount)
//     waits until the restart is done, so nothing it does is undone by it.
//   - Otherwise two live processes claim one name: the newcomer is refused
//     with ILLEGAL_CLIENT naming both incarnations and addresses, and the
//     old one keeps the name.
func (m *Master) admit(c *client, id Identity, endpoint string, now int64) error {
	if id.Incarnation == "" {
		return nil
	}
	c.mu.Lock()
	cur := c.ident
	silent := time.Duration(now - c.lastBeat)
	if cur.Incarnation == "" || cur.Incarnation == id.Incarnation {
		if cur.Incarnation == "" {
			c.ident = id
		}
		restarting := c.restarting
		c.mu.Unlock()
		if restarting != nil {
			// Another contact of this incarnation (its first heartbeat,
			// racing its first mount) is restarting the node: acting
			// before that is done, a mount would be unmounted by it and
			// an SSD registration ended would leave the copies it just
			// registered unconfirmed, then dropped.
			<-restarting
		}
		return nil
	}
	if slices.Contains(c.retired, id.Incarnation) {
		// A late call of a process a restart already replaced (its
		// successor holds the same SSD directory, so it would otherwise
		// take the name back and void the successor's registration).
		c.mu.Unlock()
		return kverr.New(kverr.IllegalClient, "", "appliance %q: incarnation %s was replaced by %s when the appliance restarted",
			c.id, id.Incarnation, cur.Incarnation)
	}
	oldAddr := c.getEndpoint()
	st := ClientState(c.state.Load())
	takeover := id.DiskID != "" && id.DiskID == cur.DiskID ||
		endpoint != "" && endpoint == oldAddr ||
		st != ClientLive || silent >= m.cfg.RestartTakeover
	if !takeover {
		c.mu.Unlock()
		return kverr.New(kverr.IllegalClient, "",
			"appliance name %q is held by live incarnation %s at %s (last heartbeat %v ago); this is incarnation %s at %s: "+
				"give each appliance its own --name (a restarted appliance takes over once the old one has been silent %v)",
			c.id, cur.Incarnation, oldAddr, silent.Round(time.Millisecond), id.Incarnation, endpoint, m.cfg.RestartTakeover)
	}
	c.ident = id
	c.retired = append(c.retired, cur.Incarnation)
	if len(c.retired) > maxRetired {
		c.retired = slices.Delete(c.retired, 0, len(c.retired)-maxRetired)
	}
	done := make(chan struct{})
	c.restarting = done
	c.mu.Unlock()
	// Its copies can come back only from the same SSD directory.
	m.restartNode(c, cur.Incarnation, id.Incarnation, id.DiskID != "" && id.DiskID == cur.DiskID)
	c.mu.Lock()
	if c.restarting == done {
		c.restarting = nil
	}
	c.mu.Unlock()
	close(done)
	return nil
}

// maxRetired is how many replaced incarnations of a name admit remembers.
const maxRetired = 4

// restartNode forgets what the old incarnation of c held in memory: its
// segments are unmounted at once (their MEMORY and NOF replicas dropped;
// objects left with none disappear, so a re-put works; a pending drain
// ends with them), its offload tasks are reset, its in-flight puts
// revoked. Its LOCAL_DISK replicas (disk: it restarted on the same SSD
// directory; else they are dropped at once) become
// unconfirmed until the new incarnation has registered what its SSD tier
// recovered (RegisterDiskObjects, then its end): registered copies are
// kept, missing or quarantined ones dropped then (diskindex.go,
// "Restarts"). Removals pending for the name stay queued for the new
// incarnation.
func (m *Master) restartNode(c *client, oldInc, newInc string, disk bool) {
	if disk {
		// First, so that a Remove from now on reaches the new incarnation.
		m.beginDiskRegistration(c)
	}
	// The old incarnation's offload tasks end here; one it was writing
	// may have left a durable copy: a placeholder stands for it (before
	// the unmount drops its DRAM source, so the object does not vanish).
	voided := m.offload.dropNode(c.id)
	for _, k := range voided {
		m.resetOffloadAfterRestart(k, c, disk)
	}
	if disk {
		m.forEachShard(func(sh *shard) { markRestartedLocked(sh, c) })
	} else {
		m.dropDisk(c, 0, dropAll)
	}
	for _, s := range m.segs.all() {
		if s.owner == c {
			m.unmountNow(s, "owner restarted")
		}
	}
	m.dram.forget(c.id) // records of the old incarnation's DRAM mean nothing to the new one
	m.reofferOffloads(voided)
	m.revokePutsOf(c.id)
	m.ctr.add(cApplianceRestarts, 1)
	m.publish(Event{Kind: "client", Node: c.id, Message: "restarted: incarnation " + oldInc + " replaced by " + newInc})
}
