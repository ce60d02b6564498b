package target

import (
	"encoding/binary"
	"errors"

	"kvtier/nof/namespace"
	"kvtier/nof/nvme"
	"kvtier/nof/pdu"
)

// io executes one NVM command on an I/O queue. It owns inCapsule (a pool
// buffer or nil).
func (q *conn) io(cmd *pdu.Command, inCapsule []byte) {
	pool := &q.t.bufs
	defer func() {
		if inCapsule != nil {
			pool.put(inCapsule)
		}
	}()
	if len(inCapsule) > q.icd {
		q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCSGLLengthInvalid), 0, 0)
		return
	}
	n := q.ctrl.sub.namespace(cmd.NSID)
	if n == nil {
		q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidNamespace), 0, 0)
		return
	}
	var err error
	switch cmd.Opcode {
	case nvme.CmdRead:
		err = q.read(cmd, n)
		if err == nil {
			return // completed by sendData
		}
	case nvme.CmdWrite:
		err = q.write(cmd, n, inCapsule)
	case nvme.CmdFlush:
		n.otherOps.Add(1)
		err = n.ns.Flush(q.ctx)
	case nvme.CmdWriteZeroes:
		err = q.writeZeroes(cmd, n)
	case nvme.CmdDSM:
		err = q.dsm(cmd, n, inCapsule)
	default:
		err = nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidOpcode)
	}
	if err != nil && q.ctx.Err() != nil {
		return // connection gone: nobody to answer
	}
	if err != nil {
		var se *nvme.StatusError
		if !errors.As(err, &se) {
			n.errs.Add(1)
			q.t.cfg.Logger.Warn("nvme-tcp namespace I/O failed", "nsid", n.nsid, "err", err)
		}
	}
	q.complete(cmd.CID, err, 0, 0)
}

// lbaRange validates SLBA/NLB of a Read/Write/Write Zeroes command and
// returns the byte offset and length.
func (q *conn) lbaRange(cmd *pdu.Command, n *nsState, transfer bool) (int64, int, error) {
	slba := uint64(cmd.CDW10) | uint64(cmd.CDW11)<<32
	nlb := uint64(cmd.CDW12&0xFFFF) + 1
	bs := uint64(n.ns.BlockSize())
	blocks := uint64(n.ns.Size()) / bs
	if slba >= blocks || nlb > blocks-slba {
		return 0, 0, nvme.Errf(nvme.SCTGeneric, nvme.SCLBAOutOfRange)
	}
	length := nlb * bs
	if transfer && length > uint64(q.t.cfg.MaxTransfer) {
		return 0, 0, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField)
	}
	return int64(slba * bs), int(length), nil
}

func (q *conn) read(cmd *pdu.Command, n *nsState) error {
	off, length, err := q.lbaRange(cmd, n, true)
	if err != nil {
		return err
	}
	if cmd.SGL.Type != pdu.SGLTransport || int(cmd.SGL.Len) != length {
		return nvme.Errf(nvme.SCTGeneric, nvme.SCSGLLengthInvalid)
	}
	buf := q.t.bufs.get(length)
	defer q.t.bufs.put(buf)
	if err := n.ns.ReadAt(q.ctx, buf, off); err != nil {
		return err
	}
	n.readOps.Add(1)
	n.readBytes.Add(uint64(length))
	q.sendData(cmd.CID, buf)
	return nil
}

func (q *conn) write(cmd *pdu.Command, n *nsState, inCapsule []byte) error {
	off, length, err := q.lbaRange(cmd, n, true)
	if err != nil {
		return err
	}
	data, owned, err := q.fetchData(cmd, inCapsule, length)
	if err != nil {
		return err
	}
	if owned && len(inCapsule) == 0 {
		defer q.t.bufs.put(data)
	}
	if err := n.ns.WriteAt(q.ctx, data, off); err != nil {
		return err
	}
	n.writeOps.Add(1)
	n.writeBytes.Add(uint64(length))
	return nil
}

func (q *conn) writeZeroes(cmd *pdu.Command, n *nsState) error {
	off, length, err := q.lbaRange(cmd, n, false)
	if err != nil {
		return err
	}
	n.otherOps.Add(1)
	if z, ok := n.ns.(namespace.ZeroWriter); ok {
		return z.WriteZeroes(q.ctx, off, int64(length))
	}
	zero := q.t.bufs.get(min(length, q.t.cfg.MaxTransfer))
	defer q.t.bufs.put(zero)
	clear(zero)
	for done := 0; done < length; done += len(zero) {
		k := min(len(zero), length-done)
		if err := n.ns.WriteAt(q.ctx, zero[:k], off+int64(done)); err != nil {
			return err
		}
	}
	return nil
}

// dsm implements Dataset Management; only the deallocate attribute acts.
func (q *conn) dsm(cmd *pdu.Command, n *nsState, inCapsule []byte) error {
	nr := int(cmd.CDW10&0xFF) + 1
	data, owned, err := q.fetchData(cmd, inCapsule, nr*16)
	if err != nil {
		return err
	}
	if owned && len(inCapsule) == 0 {
		defer q.t.bufs.put(data)
	}
	if cmd.CDW11&(1<<2) == 0 {
		return nil // only hints: nothing to do
	}
	bs := uint64(n.ns.BlockSize())
	blocks := uint64(n.ns.Size()) / bs
	type rng struct{ off, n int64 }
	ranges := make([]rng, 0, nr)
	for i := 0; i < nr; i++ {
		r := data[16*i:]
		nlb := uint64(binary.LittleEndian.Uint32(r[4:]))
		slba := binary.LittleEndian.Uint64(r[8:])
		if slba >= blocks || nlb > blocks-slba {
			return nvme.Errf(nvme.SCTGeneric, nvme.SCLBAOutOfRange)
		}
		ranges = append(ranges, rng{int64(slba * bs), int64(nlb * bs)})
	}
	n.otherOps.Add(1)
	d, ok := n.ns.(namespace.Deallocator)
	if !ok {
		return nil // deallocation is advisory
	}
	for _, r := range ranges {
		if r.n == 0 {
			continue
		}
		if err := d.Deallocate(q.ctx, r.off, r.n); err != nil {
			return err
		}
	}
	return nil
}
