package client

import (
	"context"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/transfer"
)

// SegmentMemory returns the memory of a DRAM segment that this process
// serves, or nil when it serves none by that name. A process that serves
// segments (an appliance) passes it to View so that front ends in that
// process can read objects where they lie. The memory must stay mapped
// while any View of it is in use.
type SegmentMemory func(segment string) []byte

// View is an object's bytes read in place: the extent of a MEMORY replica
// in a segment of this process, under the read lease the master granted.
//
// The bytes are not copied and not yet checked: the caller verifies them
// against CRC32C (when HasChecksum) after it has used them, and throws
// away whatever it produced from them when they fail or when the lease
// ended first (Valid). The master promises not to evict or reuse the
// extent before Deadline; only a forced Remove by some client breaks that
// promise. Its bytes still match the checksum until the space is reused,
// so the check after use also asks this process's transfer engine, which
// serves the segment, whether its data port would still serve the
// replica's grant (transfer.Engine.Admits: the free of a removed object
// is applied there before the removal returns). Bytes must never be
// written.
type View struct {
	Bytes       []byte
	CRC32C      uint32
	HasChecksum bool
	Deadline    time.Time // end of the read lease

	// The engine serving the segment, and the replica's segment and
	// grant, for Valid's question (nil engine: nothing to ask).
	engine  *transfer.Engine
	segment string
	grant   []byte
}

// Valid reports whether bytes derived from v (a copy, a send, a
// comparison) that ended with a checksum of crc are the object's: the
// checksum matches (or the object has none), the lease had not ended and
// the object was not removed meanwhile. Call it after the bytes were used.
func (v *View) Valid(crc uint32) bool {
	return (!v.HasChecksum || crc == v.CRC32C) && v.Live()
}

// Live reports whether the lease still runs and the object was not
// removed since (Valid's check besides the checksum). A caller about to
// send bytes it cannot take back asks it first, so a removed object is
// answered as missing rather than cut off after its check.
func (v *View) Live() bool {
	return time.Now().Before(v.Deadline) && (v.engine == nil || v.engine.Admits(v.segment, v.grant))
}

// View finds key's MEMORY replica in a segment mem names and returns its
// bytes in place, taking (or reusing, see Config.LeaseCacheKeys) the read
// lease as Get does. ok is false, with no error, when no replica lies in
// this process's memory: the caller reads with Get instead. Errors are
// Get's (OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY for a put in flight, ...).
//
// Reads through views count as reads for eviction order like Get's.
func (c *Client) View(ctx context.Context, key string, mem SegmentMemory) (v View, ok bool, err error) {
	if mem == nil {
		return View{}, false, nil
	}
	rl := c.leases.get(key)
	if rl != nil {
		if v, ok := c.localView(rl, mem); ok {
			c.noteCachedRead(key)
			return v, true, nil
		}
		c.leases.drop(key)
	}
	rl, err = c.Query(ctx, key)
	if err != nil {
		return View{}, false, err
	}
	c.leases.put(key, rl)
	v, ok = c.localView(rl, mem)
	return v, ok, nil
}

// DropLease forgets the cached replica list of key (Config.LeaseCacheKeys):
// the next read asks the master. A caller whose View failed its check calls
// it, since the object may have been replaced.
func (c *Client) DropLease(key string) { c.leases.drop(key) }

// localView returns the first MEMORY replica of rl that lies in mem.
func (c *Client) localView(rl *ReplicaList, mem SegmentMemory) (View, bool) {
	for _, r := range rl.Replicas {
		if r.Type != kvtierpb.ReplicaType_MEMORY || r.Length != rl.Size || r.Length == 0 {
			continue
		}
		m := mem(r.Segment)
		if m == nil || r.Offset > uint64(len(m)) || r.Length > uint64(len(m))-r.Offset {
			continue
		}
		return View{Bytes: m[r.Offset : r.Offset+r.Length : r.Offset+r.Length], CRC32C: rl.CRC32C,
			HasChecksum: rl.HasChecksum, Deadline: rl.LeaseDeadline,
			engine: c.engine, segment: r.Segment, grant: r.Grant}, true
	}
	return View{}, false
}
