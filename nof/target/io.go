package target

import (
	"encoding/binary"
	"errors"

	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
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
	if _, ok := n.ns.(namespace.Starter); ok && cmd.Opcode == nvme.CmdWrite {
		q.inTurn(int(cmd.SGL.Len), func() { q.answer(cmd, n, err) }) // an R2T write begun by the reader
		return
	}
	q.answer(cmd, n, err)
}

// answer completes cmd with err (nil: success), unless the connection is
// gone.
func (q *conn) answer(cmd *pdu.Command, n *nsState, err error) {
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

// begin starts a well-formed Read, or Write with in-capsule data, of a
// namespace.Starter on the calling (reader) goroutine and returns what
// finishes it: wait for the device, then answer. It never blocks on the
// device or the network. nil means "not started: run io as usual" (other
// commands, other namespaces, and every malformed command, which io
// answers with its error).
func (q *conn) begin(cmd *pdu.Command, inCapsule []byte) func() {
	if (cmd.Opcode != nvme.CmdRead && cmd.Opcode != nvme.CmdWrite) || len(inCapsule) > q.icd {
		return nil
	}
	n := q.ctrl.sub.namespace(cmd.NSID)
	if n == nil {
		return nil
	}
	if _, ok := n.ns.(namespace.Starter); !ok {
		return nil
	}
	off, length, err := q.lbaRange(cmd, n, true)
	if err != nil {
		return nil
	}
	pool := &q.t.bufs
	if cmd.Opcode == nvme.CmdRead {
		if cmd.SGL.Type != pdu.SGLTransport || int(cmd.SGL.Len) != length {
			return nil
		}
		buf := pool.get(length)
		wait, err := q.starter(n).StartRead(buf, off)
		if err != nil {
			pool.put(buf)
			return nil
		}
		return func() {
			defer pool.put(buf)
			if err := wait(); err != nil {
				q.answer(cmd, n, err)
				return
			}
			n.readOps.Add(1)
			n.readBytes.Add(uint64(length))
			q.inTurn(length, func() { q.sendData(cmd.CID, buf) })
		}
	}
	if cmd.SGL.Type != pdu.SGLInCapsule || checkInCapsule(cmd, inCapsule, length) != nil {
		return nil
	}
	wait, err := q.starter(n).StartWrite(inCapsule, off)
	if err != nil {
		return nil
	}
	return func() {
		defer pool.put(inCapsule)
		err := wait()
		if err == nil {
			n.writeOps.Add(1)
			n.writeBytes.Add(uint64(length))
		}
		q.inTurn(length, func() { q.answer(cmd, n, err) })
	}
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
	// With a Starter, the reader goroutine starts the device write the
	// moment the last H2CData arrives.
	var start func([]byte) func() error
	if _, ok := n.ns.(namespace.Starter); ok {
		start = func(buf []byte) func() error {
			wait, err := q.starter(n).StartWrite(buf, off) // on the reader goroutine
			if err != nil {
				return func() error { return err }
			}
			return wait
		}
	}
	data, owned, wait, err := q.fetchData(cmd, inCapsule, length, start)
	if err != nil {
		return err
	}
	if owned && len(inCapsule) == 0 {
		defer q.t.bufs.put(data)
	}
	if wait != nil {
		err = wait()
	} else {
		err = n.ns.WriteAt(q.ctx, data, off)
	}
	if err != nil {
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
	data, owned, _, err := q.fetchData(cmd, inCapsule, nr*16, nil)
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
