package initiator

import (
	"context"
	"encoding/binary"
	"sync"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
)

// ioTarget picks the next I/O queue and checks the range against nsid.
func (c *Controller) ioTarget(nsid uint32, n int, off int64) (*queue, Namespace, int, int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed || c.admin == nil {
		return nil, Namespace{}, 0, 0, kverr.New(kverr.UnavailableInCurrentStatus, c.addr, "controller closed")
	}
	ns, ok := c.ns[nsid]
	if !ok {
		return nil, Namespace{}, 0, 0, kverr.New(kverr.ObjectNotFound, "", "no active namespace %d", nsid)
	}
	bs := int64(ns.BlockSize)
	switch {
	case off < 0 || off%bs != 0 || int64(n)%bs != 0:
		return nil, Namespace{}, 0, 0, kverr.New(kverr.InvalidParams, "", "range [%d,+%d): offset and length must be multiples of namespace %d's block size %d", off, n, nsid, bs)
	case off > ns.Size()-int64(n):
		return nil, Namespace{}, 0, 0, kverr.New(kverr.InvalidParams, "", "range [%d,+%d) ends past namespace %d's %d bytes", off, n, nsid, ns.Size())
	}
	if len(c.io) == 0 {
		return nil, Namespace{}, 0, 0, kverr.New(kverr.UnavailableInCurrentStatus, c.addr, "no I/O queues")
	}
	q := c.io[int(c.rr.Add(1))%len(c.io)]
	return q, ns, c.maxTransfer, c.icd, nil
}

func rwCmd(op uint8, nsid uint32, slba uint64, nlb int) pdu.Command {
	return pdu.Command{Opcode: op, Flags: 0x40, NSID: nsid, CDW10: uint32(slba), CDW11: uint32(slba >> 32), CDW12: uint32(nlb - 1)}
}

// split runs fn over [0,n) in chunks of at most maxT bytes, concurrently,
// and returns the first error.
func split(n, maxT int, fn func(lo, hi int) error) error {
	if n <= maxT {
		return fn(0, n)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for lo := 0; lo < n; lo += maxT {
		hi := min(lo+maxT, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(lo, hi); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// ReadAt reads len(p) bytes at byte offset off of namespace nsid; both must
// be multiples of the block size.
func (c *Controller) ReadAt(ctx context.Context, nsid uint32, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	q, ns, maxT, _, err := c.ioTarget(nsid, len(p), off)
	if err != nil {
		return err
	}
	return split(len(p), maxT, func(lo, hi int) error {
		cmd := rwCmd(nvme.CmdRead, nsid, uint64(off+int64(lo))/uint64(ns.BlockSize), (hi-lo)/ns.BlockSize)
		cmd.SGL = pdu.SGL{Len: uint32(hi - lo), Type: pdu.SGLTransport}
		cpl, err := q.submit(ctx, &cmd, nil, nil, p[lo:hi])
		if err != nil {
			return err
		}
		return statusErr(cpl)
	})
}

// WriteAt writes p at byte offset off of namespace nsid (block multiples).
// Chunks that fit the controller's in-capsule size travel in the command
// capsule; larger ones are sent when the controller asks (R2T).
func (c *Controller) WriteAt(ctx context.Context, nsid uint32, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	q, ns, maxT, icd, err := c.ioTarget(nsid, len(p), off)
	if err != nil {
		return err
	}
	return split(len(p), maxT, func(lo, hi int) error {
		cmd := rwCmd(nvme.CmdWrite, nsid, uint64(off+int64(lo))/uint64(ns.BlockSize), (hi-lo)/ns.BlockSize)
		var cpl pdu.Completion
		var err error
		if hi-lo <= icd {
			cmd.SGL = pdu.SGL{Len: uint32(hi - lo), Type: pdu.SGLInCapsule}
			cpl, err = q.submit(ctx, &cmd, p[lo:hi], nil, nil)
		} else {
			cmd.SGL = pdu.SGL{Len: uint32(hi - lo), Type: pdu.SGLTransport}
			cpl, err = q.submit(ctx, &cmd, nil, p[lo:hi], nil)
		}
		if err != nil {
			return err
		}
		return statusErr(cpl)
	})
}

// Flush makes previous writes to nsid durable.
func (c *Controller) Flush(ctx context.Context, nsid uint32) error {
	q, _, _, _, err := c.ioTarget(nsid, 0, 0)
	if err != nil {
		return err
	}
	cmd := pdu.Command{Opcode: nvme.CmdFlush, Flags: 0x40, NSID: nsid, SGL: pdu.SGL{Type: pdu.SGLTransport}}
	cpl, err := q.submit(ctx, &cmd, nil, nil, nil)
	if err != nil {
		return err
	}
	return statusErr(cpl)
}

// WriteZeroes zeroes n bytes at off (block multiples, at most 65536 blocks).
func (c *Controller) WriteZeroes(ctx context.Context, nsid uint32, off, n int64) error {
	q, ns, _, _, err := c.ioTarget(nsid, int(n), off)
	if err != nil {
		return err
	}
	nlb := int(n / int64(ns.BlockSize))
	if nlb == 0 || nlb > 65536 {
		return kverr.New(kverr.InvalidParams, "", "write zeroes of %d blocks (1..65536)", nlb)
	}
	cmd := rwCmd(nvme.CmdWriteZeroes, nsid, uint64(off)/uint64(ns.BlockSize), nlb)
	cmd.SGL = pdu.SGL{Type: pdu.SGLTransport}
	cpl, err := q.submit(ctx, &cmd, nil, nil, nil)
	if err != nil {
		return err
	}
	return statusErr(cpl)
}

// Deallocate discards n bytes at off (Dataset Management, AD).
func (c *Controller) Deallocate(ctx context.Context, nsid uint32, off, n int64) error {
	q, ns, _, icd, err := c.ioTarget(nsid, int(n), off)
	if err != nil {
		return err
	}
	nlb := uint64(n) / uint64(ns.BlockSize)
	if nlb == 0 || nlb > 0xFFFFFFFF {
		return kverr.New(kverr.InvalidParams, "", "deallocate of %d blocks", nlb)
	}
	rng := make([]byte, 16)
	binary.LittleEndian.PutUint32(rng[4:], uint32(nlb))
	binary.LittleEndian.PutUint64(rng[8:], uint64(off)/uint64(ns.BlockSize))
	cmd := pdu.Command{Opcode: nvme.CmdDSM, Flags: 0x40, NSID: nsid, CDW10: 0, CDW11: 1 << 2}
	var cpl pdu.Completion
	if icd >= 16 {
		cmd.SGL = pdu.SGL{Len: 16, Type: pdu.SGLInCapsule}
		cpl, err = q.submit(ctx, &cmd, rng, nil, nil)
	} else {
		cmd.SGL = pdu.SGL{Len: 16, Type: pdu.SGLTransport}
		cpl, err = q.submit(ctx, &cmd, nil, rng, nil)
	}
	if err != nil {
		return err
	}
	return statusErr(cpl)
}
