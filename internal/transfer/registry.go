package transfer

import (
	"slices"

	"github.com/kvtier/kvtier/kverr"
)

// The registry: the memory segments and extent sources this Engine serves,
// the one record of them in a process. The appliance and the client SDK
// register their segments here and look them up here (Segment, Segments)
// instead of keeping maps of their own; the transports learn of every
// registration (shared-memory peers get the segment's memfd, RDMA
// registers it as a memory region) so what a node offers is decided in
// one place.

// SegmentOffer is what the transports beyond TCP need to reach a segment
// of this engine from another node, as a node announces it at mount (the
// master copies it into every replica in the segment, see
// api/kvtierpb/master.proto Segment.rdma_*). The zero value offers nothing.
type SegmentOffer struct {
	// RDMAAddr is the RDMA side channel's host:port (rdma package), or ""
	// when this engine offers no RDMA.
	RDMAAddr string
	// RDMABase and RDMAKey are the segment's registered memory region: its
	// first byte's virtual address in this process and its rkey.
	RDMABase uint64
	RDMAKey  uint32
	// RDMAFreesBase and RDMAFreesKey are the memory region of the
	// segment's free table (shmfrees.go), which a one-sided READ checks
	// its grant against, as the data port would (rdmaTransport.admitted);
	// 0 when none is offered.
	RDMAFreesBase uint64
	RDMAFreesKey  uint32
}

// RegisterSegment makes mem reachable as name, to peers and to local callers.
func (e *Engine) RegisterSegment(name string, mem []byte) error {
	if err := validName(name); err != nil {
		return err
	}
	if len(mem) == 0 {
		return kverr.New(kverr.InvalidParams, "", "transfer: segment %q has no memory", name)
	}
	s := &segment{name: name, mem: mem}
	e.mu.RLock()
	_, dup := e.segments[name]
	closed := e.closed
	e.mu.RUnlock()
	switch {
	case closed:
		return errClosed()
	case dup:
		return kverr.New(kverr.SegmentAlreadyExists, "", "transfer: segment %q already registered", name)
	}
	// Registering a memory region pins and maps the whole segment (slow
	// for GiBs): outside the lock, undone below if the name was taken
	// meanwhile.
	if e.rdma != nil {
		e.rdma.addSegment(s)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.insertSegmentLocked(s)
	if err != nil && e.rdma != nil {
		e.rdma.dropSegment(s)
	}
	return err
}

func (e *Engine) insertSegmentLocked(s *segment) error {
	if e.closed {
		return errClosed()
	}
	if _, ok := e.segments[s.name]; ok {
		return kverr.New(kverr.SegmentAlreadyExists, "", "transfer: segment %q already registered", s.name)
	}
	if _, ok := e.sources[s.name]; ok {
		return kverr.New(kverr.SegmentAlreadyExists, "", "transfer: %q already registered as an extent source", s.name)
	}
	s.file, s.fileOff = e.shm.sharedFileLocked(s.mem)
	if s.file != nil {
		e.shm.addFreesLocked(s)
	}
	e.segments[s.name] = s
	e.shm.notifyLocked(shmSegment, s)
	return nil
}

// UnregisterSegment stops serving name and waits until no request uses its
// memory any more; afterwards the caller may unmap it. Requests that arrive
// meanwhile get SEGMENT_NOT_FOUND. Waits are bounded by IOTimeout per frame.
// An RDMA memory region of the segment is deregistered before it returns,
// so no peer's NIC touches the memory afterwards either.
func (e *Engine) UnregisterSegment(name string) error {
	e.mu.Lock()
	s, ok := e.segments[name]
	if ok {
		delete(e.segments, name)
		e.shm.notifyLocked(shmGone, s)
		if s.frees != nil {
			e.shm.frees.remove(name)
		}
	}
	e.mu.Unlock()
	if !ok {
		return kverr.New(kverr.SegmentNotFound, "", "transfer: segment %q not registered", name)
	}
	s.refs.Wait()
	if e.rdma != nil {
		e.rdma.dropSegment(s)
	}
	if s.frees != nil {
		// After the table's memory region is gone: no peer's NIC reads it.
		s.frees.retire()
	}
	return nil
}

// RegisterSource makes src reachable as name for READ requests.
func (e *Engine) RegisterSource(name string, src ExtentSource) error {
	if err := validName(name); err != nil {
		return err
	}
	if src == nil {
		return kverr.New(kverr.InvalidParams, "", "transfer: nil extent source %q", name)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed()
	}
	if _, ok := e.segments[name]; ok {
		return kverr.New(kverr.SegmentAlreadyExists, "", "transfer: %q already registered as a segment", name)
	}
	if _, ok := e.sources[name]; ok {
		return kverr.New(kverr.SegmentAlreadyExists, "", "transfer: extent source %q already registered", name)
	}
	e.sources[name] = src
	return nil
}

// Segment returns the memory registered as name (nil, false when none).
// The caller must not use it after unregistering the segment.
func (e *Engine) Segment(name string) ([]byte, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if s, ok := e.segments[name]; ok {
		return s.mem, true
	}
	return nil, false
}

// Segments returns the names of the registered memory segments, sorted.
func (e *Engine) Segments() []string {
	e.mu.RLock()
	out := make([]string, 0, len(e.segments))
	for n := range e.segments {
		out = append(out, n)
	}
	e.mu.RUnlock()
	slices.Sort(out)
	return out
}

// Offer returns what other nodes need to reach segment name over the
// transports beyond TCP (zero when it offers none, or name is not
// registered): a node announces it when it mounts the segment.
func (e *Engine) Offer(name string) SegmentOffer {
	if e.rdma == nil {
		return SegmentOffer{}
	}
	e.mu.Lock()
	s := e.segments[name]
	if s != nil && s.frees == nil {
		// Peers reading it with one-sided RDMA pass no data port: they
		// check their grants against its free table (a shared segment
		// has one already; a caller's own buffers, never offered, need
		// none).
		e.shm.addFreesLocked(s)
	}
	e.mu.Unlock()
	if s == nil {
		return SegmentOffer{}
	}
	return e.rdma.offer(s)
}

// acquire looks name up and pins a segment (release with s.refs.Done()) or
// returns a source.
func (e *Engine) acquire(name string) (*segment, ExtentSource) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if s, ok := e.segments[name]; ok {
		s.refs.Add(1)
		return s, nil
	}
	return nil, e.sources[name]
}

func validName(name string) error {
	if len(name) < 1 || len(name) > MaxNameLen {
		return kverr.New(kverr.InvalidParams, "", "transfer: segment name length %d outside 1..%d", len(name), MaxNameLen)
	}
	return nil
}

// checkRange is the overflow-safe bounds check of [off, off+n) in a segment
// of size bytes.
func checkRange(name string, size, off, n uint64) error {
	if off > size || n > size-off {
		return kverr.New(kverr.InvalidParams, "", "segment %q: range offset=%d length=%d outside segment of %d bytes", name, off, n, size)
	}
	return nil
}
