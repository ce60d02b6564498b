package transfer

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/memcopy"
	"github.com/kvtier/kvtier/kverr"
)

// Shared memory between processes of one host: see "Shared memory" in the
// package documentation.

// shm message kinds (server -> client, one SOCK_SEQPACKET packet each).
const (
	shmMagic uint32 = 0x4B56544D // "KVTM"
	// shmVersion is what this engine sends: a SEGMENT carries the
	// segment's free table too. Version 1 (no free table) is still read.
	shmVersion   uint8 = 2
	shmVersionV1 uint8 = 1

	shmSegment uint8 = 1 // a segment: its memfd and its free table's attached (SCM_RIGHTS)
	shmGone    uint8 = 2 // a segment unregistered
	shmSynced  uint8 = 3 // every segment registered so far has been sent

	shmHeaderLen = 24
	// shmAlign is the alignment of client mappings: 2 MiB, a multiple of
	// every page size a region may use (hugetlb memfds need it).
	shmAlign = 2 << 20
	// shmQueue bounds the messages waiting for a slow peer; beyond it the
	// peer is disconnected (it falls back to TCP and reconnects).
	shmQueue = 4096
	// shmRetry is the least time between two discoveries of one peer; it
	// doubles after each failed one, up to shmRetryMax (a peer that shares
	// nothing is asked again now and then, in case it restarted sharing).
	shmRetry    = time.Second
	shmRetryMax = time.Minute
)

// sharedRegion is memory a caller declared shareable (ShareMemory).
type sharedRegion struct {
	mem  []byte
	file *os.File
}

// shmTransport is same-host shared memory: the serving side (a Unix
// socket handing memfds of shared segments to peers of this user) and the
// client side (per peer endpoint, a discovery and the mapping of the
// peer's segments). A request reaches it when its segment is mapped.
type shmTransport struct {
	e *Engine

	// Serving side, guarded by e.mu (registrations are announced in order
	// with the segment list a new peer gets):
	shared []sharedRegion           // memory peers on this host may map
	lis    *net.UnixListener        // shared-memory socket (nil until ShareMemory)
	conns  map[*shmSrvConn]struct{} // peers mapping shared segments

	frees freeTables // each shared segment's free table (shmfrees.go)

	mu sync.RWMutex
	// guarded by mu:
	peers  map[string]*shmPeerState // by endpoint
	closed bool
}

// shmPeerState is the client side's state for one peer endpoint.
type shmPeerState struct {
	addr     string
	sameHost bool     // addr is this host: its segments may be mapped
	shm      shmState // shared-memory mapping of its segments
}

func newShmTransport(e *Engine) *shmTransport {
	return &shmTransport{e: e, conns: map[*shmSrvConn]struct{}{}, peers: map[string]*shmPeerState{}}
}

func (t *shmTransport) Name() string { return "shm" }

// reaches finds r's segment mapped from a same-host peer (stashing it in r),
// starting the peer's discovery when there is none yet.
func (t *shmTransport) reaches(r *reqState) bool {
	if t.e.cfg.DisableSharedMemory || r.req.Bucket != 0 {
		return false
	}
	p := t.peer(r.req.Endpoint)
	if p == nil {
		return false
	}
	r.shmp, r.shm = t.e.shmFor(p, r.req.Segment)
	return r.shm != nil
}

// submit copies each request through its mapped segment. A mapping gone
// meanwhile fails it with TRANSFER_FAIL, so the next route takes it.
func (t *shmTransport) submit(ctx context.Context, rs []*reqState) {
	for _, r := range rs {
		r.via = viaShared
		sp, s := r.shmp, r.shm
		r.shmp, r.shm = nil, nil
		ok, err := t.e.local.copyShared(r, sp, s)
		if !ok {
			err = kverr.New(kverr.TransferFail, "", "transfer: %s segment %q on %s: shared mapping gone", r.req.Op, r.req.Segment, r.req.Endpoint)
		}
		if errors.Is(err, errNotAdmitted) {
			t.e.stats.shmNotAdmitted.Add(1)
		}
		r.sliceDone(err)
	}
}

// peer returns the state of endpoint ep (nil after close or for "").
func (t *shmTransport) peer(ep string) *shmPeerState {
	t.mu.RLock()
	p, ok := t.peers[ep]
	closed := t.closed
	t.mu.RUnlock()
	if ok || closed || ep == "" {
		return p
	}
	same := sameHostAddr(ep) // outside the lock: lists interfaces
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	if p, ok := t.peers[ep]; ok {
		return p
	}
	p = &shmPeerState{addr: ep, sameHost: same}
	t.peers[ep] = p
	return p
}

// peerCount is how many processes map this engine's shared segments.
func (t *shmTransport) peerCount() int {
	t.e.mu.RLock()
	defer t.e.mu.RUnlock()
	return len(t.conns)
}

// close stops the serving side (discoveries end with the engine's ctx).
func (t *shmTransport) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.e.mu.Lock()
	lis := t.lis
	shms := make([]*shmSrvConn, 0, len(t.conns))
	for c := range t.conns {
		shms = append(shms, c)
	}
	t.e.mu.Unlock()
	if lis != nil {
		lis.Close()
	}
	for _, c := range shms {
		c.close()
	}
}

// addFreesLocked gives segment s its free table, filled from the
// engine's revocations, before s is announced; s is neither shared nor
// offered over RDMA with grants when the table cannot be made (a peer
// could not be checked). e.mu is held.
func (t *shmTransport) addFreesLocked(s *segment) {
	ft, err := newFreeTable(s.name, uint64(len(s.mem)), nil)
	if err != nil {
		s.file, s.fileOff = nil, 0
		t.e.stats.shmNoTable.Add(1)
		return
	}
	s.frees = ft
	t.frees.add(s.name, ft)
	// After add: a change made from now on reaches the table either way
	// (SetGrantKeys sets the keys, then tells the tables it sees).
	ft.setKeys(t.e.grants.keys.IDs())
	if rev := t.e.grants.rev.Load(); rev != nil {
		rev.Replay(s.name, ft)
	}
}

// ShareMemory declares that mem is the MAP_SHARED mapping of f from offset 0
// (a dram.MapShared region), so segments registered inside it can be mapped
// by peers on the same host instead of travelling over TCP. The first call
// starts the engine's shared-memory socket (an abstract Unix socket, so only
// processes in this network namespace reach it; peers must run as the same
// user or as root). f must stay open until the engine is closed.
func (e *Engine) ShareMemory(mem []byte, f *os.File) error {
	if len(mem) == 0 || f == nil {
		return kverr.New(kverr.InvalidParams, "", "transfer: ShareMemory needs memory and its file")
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return kverr.New(kverr.InvalidParams, "", "transfer: ShareMemory: stat %s: %v", f.Name(), err)
	}
	if uint64(st.Size) < uint64(len(mem)) {
		return kverr.New(kverr.InvalidParams, "", "transfer: ShareMemory: file %s has %d bytes, memory %d", f.Name(), st.Size, len(mem))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed()
	}
	t := e.shm
	for _, r := range t.shared {
		if overlaps(r.mem, mem) {
			return kverr.New(kverr.InvalidParams, "", "transfer: ShareMemory: memory overlaps a region already shared")
		}
	}
	for name, s := range e.segments {
		if overlaps(s.mem, mem) {
			return kverr.New(kverr.InvalidParams, "", "transfer: ShareMemory: segment %q was registered before its memory was shared", name)
		}
	}
	if t.lis == nil {
		var id [8]byte
		_, _ = rand.Read(id[:])
		addr := &net.UnixAddr{Name: "@kvtier-shm-" + hex.EncodeToString(id[:]), Net: "unixpacket"}
		l, err := net.ListenUnix("unixpacket", addr)
		if err != nil {
			return kverr.New(kverr.TransferFail, "", "transfer: shared-memory socket: %v", err)
		}
		t.lis = l
		e.wg.Add(1) // under mu: ordered before Close's Wait
		go e.acceptShm(l)
	}
	t.shared = append(t.shared, sharedRegion{mem: mem, file: f})
	return nil
}

// SharedAddr is the shared-memory socket's address ("" when nothing is
// shared).
func (e *Engine) SharedAddr() string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.shm.lis == nil {
		return ""
	}
	return e.shm.lis.Addr().String()
}

// SharedPending reports whether a discovery of some peer's shared memory
// is still running (requests to that peer go over TCP until it ends), so
// a caller that wants to measure the steady state can wait for it.
func (e *Engine) SharedPending() bool {
	e.shm.mu.RLock()
	defer e.shm.mu.RUnlock()
	for _, p := range e.shm.peers {
		if p.shm.running.Load() && p.shm.active.Load() == nil {
			return true // discovering, not mapped yet
		}
	}
	return false
}

func overlaps(a, b []byte) bool {
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// sharedFileLocked finds the shared region holding mem: its file and mem's
// offset in it.
func (t *shmTransport) sharedFileLocked(mem []byte) (*os.File, int64) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	for _, r := range t.shared {
		r0 := uintptr(unsafe.Pointer(unsafe.SliceData(r.mem)))
		if p >= r0 && p+uintptr(len(mem)) <= r0+uintptr(len(r.mem)) {
			return r.file, int64(p - r0)
		}
	}
	return nil, 0
}

// ---- serving side ----

// shmSrvConn is one peer process mapping this engine's segments.
type shmSrvConn struct {
	uc   *net.UnixConn
	out  chan shmMsg
	once sync.Once
}

type shmMsg struct {
	kind uint8
	seg  *segment // shmSegment, shmGone
}

func (c *shmSrvConn) close() { c.once.Do(func() { c.uc.Close() }) }

// enqueue hands m to the writer; a peer too slow to keep up is dropped.
func (c *shmSrvConn) enqueue(m shmMsg) {
	select {
	case c.out <- m:
	default:
		c.close()
	}
}

func (e *Engine) acceptShm(l *net.UnixListener) {
	defer e.wg.Done()
	addr := l.Addr().String()
	var delay time.Duration
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if e.acceptFailed("shared-memory listener", addr, err, &delay) {
				continue // out of descriptors: back off, as the data port does
			}
			return
		}
		e.acceptOK(addr, &delay)
		if err := checkPeerUser(uc); err != nil {
			e.stats.shmRefused.Add(1)
			uc.Close()
			continue
		}
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			uc.Close()
			return
		}
		// Room for the whole list below (sent under mu, so it must never
		// block) and shmQueue updates after it.
		c := &shmSrvConn{uc: uc, out: make(chan shmMsg, len(e.segments)+1+shmQueue)}
		// Under mu, so no registration slips between the list and the
		// updates that follow it.
		for _, s := range e.segments {
			if s.file != nil {
				c.out <- shmMsg{kind: shmSegment, seg: s}
			}
		}
		c.out <- shmMsg{kind: shmSynced}
		e.shm.conns[c] = struct{}{}
		e.wg.Add(2)
		e.mu.Unlock()
		go e.writeShm(c)
		go e.watchShm(c)
	}
}

// checkPeerUser admits processes of this user and root only: a peer that
// maps a segment can read and write all of it.
func checkPeerUser(uc *net.UnixConn) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if cred.Uid != 0 && cred.Uid != uint32(os.Geteuid()) {
		return fmt.Errorf("peer uid %d is neither %d nor root", cred.Uid, os.Geteuid())
	}
	return nil
}

// writeShm sends c's queued messages in order.
func (e *Engine) writeShm(c *shmSrvConn) {
	defer e.wg.Done()
	defer c.close()
	var buf [shmHeaderLen + MaxNameLen]byte
	for {
		var m shmMsg
		select {
		case m = <-c.out:
		case <-e.closing:
			return
		}
		n := shmHeaderLen
		var oob []byte
		binary.BigEndian.PutUint32(buf[0:], shmMagic)
		buf[4], buf[5] = shmVersion, m.kind
		clear(buf[6:shmHeaderLen])
		if m.seg != nil {
			n += copy(buf[shmHeaderLen:], m.seg.name)
			binary.BigEndian.PutUint16(buf[6:], uint16(len(m.seg.name)))
			binary.BigEndian.PutUint64(buf[8:], uint64(len(m.seg.mem)))
			binary.BigEndian.PutUint64(buf[16:], uint64(m.seg.fileOff))
			if m.kind == shmSegment {
				oob = unix.UnixRights(int(m.seg.file.Fd()), int(m.seg.frees.file.Fd()))
			}
		}
		_ = c.uc.SetWriteDeadline(time.Now().Add(e.cfg.IOTimeout))
		if _, _, err := c.uc.WriteMsgUnix(buf[:n], oob, nil); err != nil {
			return
		}
	}
}

// watchShm waits for the peer to hang up (it sends nothing) and forgets it.
func (e *Engine) watchShm(c *shmSrvConn) {
	defer e.wg.Done()
	var b [1]byte
	_, _ = c.uc.Read(b[:]) // returns at EOF, on error, or at Close
	c.close()
	e.mu.Lock()
	delete(e.shm.conns, c)
	e.mu.Unlock()
}

// notifyLocked tells every shared-memory peer about s (kind shmSegment
// or shmGone). e.mu is held, which orders it against acceptShm's list.
func (t *shmTransport) notifyLocked(kind uint8, s *segment) {
	if s.file == nil {
		return
	}
	for c := range t.conns {
		c.enqueue(shmMsg{kind: kind, seg: s})
	}
}

// serveShm answers an SHM request with the shared-memory socket's address,
// or refuses when nothing is shared.
func (c *srvConn) serveShm(h reqHeader) error {
	addr := c.e.SharedAddr()
	if addr == "" {
		// Not counted as a served error: every same-host peer asks once.
		return c.sendError(h, kverr.New(kverr.InvalidParams, "", "this node shares no memory"))
	}
	putResponseHeader(c.rh[:], respHeader{op: opShm, id: h.id, payloadLen: uint64(len(addr))})
	bufs := net.Buffers{c.rh[:], []byte(addr)}
	_, err := bufs.WriteTo(c.nc)
	return err
}

// ---- client side ----

// shmPeer is a peer's segments mapped into this process.
type shmPeer struct {
	mu sync.RWMutex
	// guarded by mu:
	segs map[string]*shmSeg

	dead atomic.Bool // the peer hung up; its mappings are being dropped
}

// shmSeg is one mapped segment. Copies hold mu for reading; unmapping
// takes it for writing, so memory is never unmapped under a copy.
type shmSeg struct {
	mu sync.RWMutex
	// guarded by mu:
	mapping []byte    // the whole mapping (aligned); nil once unmapped
	mem     []byte    // the segment inside it
	frees   *freeView // its free table; nil from a version-1 peer (nothing checked)
}

func (s *shmSeg) unmap() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mapping != nil {
		_ = unix.Munmap(s.mapping)
		s.mapping, s.mem = nil, nil
	}
	if s.frees != nil {
		s.frees.unmap()
		s.frees = nil
	}
}

// lookup returns the mapped segment name, or nil.
func (p *shmPeer) lookup(name string) *shmSeg {
	if p.dead.Load() {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.segs[name]
}

// shmState is a peer's shared-memory discovery, on the client side.
type shmState struct {
	active    atomic.Pointer[shmPeer]
	running   atomic.Bool  // a discovery goroutine owns the peer's mapping
	lastStart atomic.Int64 // unix nanoseconds of the last discovery
	backoff   atomic.Int64 // nanoseconds to wait after lastStart (0 = shmRetry)
}

// failed doubles the wait before the next discovery.
func (s *shmState) failed() {
	s.backoff.Store(int64(min(2*max(time.Duration(s.backoff.Load()), shmRetry), shmRetryMax)))
}

// shmFor returns p's mapped segment name, and the mapping it belongs to,
// when p shares memory with this process, starting (or restarting, at most
// once per shmRetry) the discovery otherwise.
func (e *Engine) shmFor(p *shmPeerState, name string) (*shmPeer, *shmSeg) {
	if e.cfg.DisableSharedMemory || !p.sameHost {
		return nil, nil
	}
	if sp := p.shm.active.Load(); sp != nil {
		if s := sp.lookup(name); s != nil {
			return sp, s
		}
		if !sp.dead.Load() {
			return nil, nil // not a shared segment (or not yet announced)
		}
	}
	now := time.Now().UnixNano()
	wait := max(p.shm.backoff.Load(), int64(shmRetry))
	if last := p.shm.lastStart.Load(); (last != 0 && now-last < wait) || p.shm.running.Load() {
		return nil, nil
	}
	if p.shm.running.CompareAndSwap(false, true) {
		p.shm.lastStart.Store(now)
		if !e.spawn(func() { e.runShm(p) }) {
			p.shm.running.Store(false)
		}
	}
	return nil, nil
}

// runShm discovers p's shared-memory socket, maps what it announces, keeps
// the mapping current until the peer hangs up, then unmaps everything.
func (e *Engine) runShm(p *shmPeerState) {
	defer p.shm.running.Store(false)
	uc, err := e.dialShm(p.addr)
	if err != nil {
		e.stats.shmFailed.Add(1)
		p.shm.failed()
		return
	}
	sp := &shmPeer{segs: map[string]*shmSeg{}}
	stop := context.AfterFunc(e.ctx, func() { uc.Close() })
	defer func() {
		stop()
		uc.Close()
		sp.dead.Store(true)
		p.shm.active.CompareAndSwap(sp, nil)
		sp.mu.Lock()
		segs := sp.segs
		sp.segs = map[string]*shmSeg{}
		sp.mu.Unlock()
		for _, s := range segs {
			s.unmap()
		}
	}()
	synced := false
	for {
		kind, name, m, err := readShmMsg(uc)
		if err != nil {
			if !synced {
				e.stats.shmFailed.Add(1)
				p.shm.failed()
			}
			return
		}
		switch kind {
		case shmSegment:
			sp.mu.Lock()
			old := sp.segs[name]
			sp.segs[name] = m
			sp.mu.Unlock()
			if old != nil {
				old.unmap()
			}
		case shmGone:
			sp.mu.Lock()
			old := sp.segs[name]
			delete(sp.segs, name)
			sp.mu.Unlock()
			if old != nil {
				old.unmap()
			}
		case shmSynced:
			if !synced {
				synced = true
				p.shm.backoff.Store(0)
				p.shm.active.Store(sp)
			}
		}
	}
}

// dialShm asks addr's engine for its shared-memory socket over TCP and
// connects to it.
func (e *Engine) dialShm(addr string) (*net.UnixConn, error) {
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.DialTimeout)
	defer cancel()
	nc, err := e.dialData(ctx, addr) // TLS when the data port speaks it
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	// Close must not wait for a silent peer: the whole exchange is bounded
	// by DialTimeout and ends when the engine closes.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	_ = nc.SetDeadline(time.Now().Add(e.cfg.DialTimeout))
	const name = "shm"
	var hdr [requestHeaderLen + len(name)]byte
	putRequestHeader(hdr[:], reqHeader{op: opShm, nameLen: len(name), id: 1})
	copy(hdr[requestHeaderLen:], name)
	if _, err := nc.Write(hdr[:]); err != nil {
		return nil, err
	}
	var rh [responseHeaderLen]byte
	if _, err := io.ReadFull(nc, rh[:]); err != nil {
		return nil, err // an engine without SHM closes the connection
	}
	h, err := parseResponseHeader(rh[:])
	if err != nil {
		return nil, err
	}
	if h.op != opShm || h.id != 1 {
		return nil, fmt.Errorf("%w: SHM answered with op %d id %d", errMalformed, h.op, h.id)
	}
	body := make([]byte, h.msgLen+int(h.payloadLen))
	if _, err := io.ReadFull(nc, body); err != nil {
		return nil, err
	}
	if h.status != 0 {
		return nil, kverr.New(kverr.Code(h.status), "", "%s", body[:h.msgLen])
	}
	sock := string(body[h.msgLen:])
	if len(sock) < 2 || sock[0] != '@' {
		return nil, fmt.Errorf("%w: SHM socket %q is not an abstract address", errMalformed, sock)
	}
	var ud net.Dialer
	uc, err := ud.DialContext(ctx, "unixpacket", sock)
	if err != nil {
		return nil, err
	}
	return uc.(*net.UnixConn), nil
}

// readShmMsg reads and validates one message; a segment comes back mapped.
func readShmMsg(uc *net.UnixConn) (kind uint8, name string, seg *shmSeg, err error) {
	var buf [shmHeaderLen + MaxNameLen + 1]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf[:], oob)
	if err != nil {
		return 0, "", nil, err
	}
	var fds []int
	if oobn > 0 {
		cmsgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for _, c := range cmsgs {
				if got, rerr := unix.ParseUnixRights(&c); rerr == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	// Every descriptor received is closed here: a mapping outlives it.
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	bad := func(format string, a ...any) (uint8, string, *shmSeg, error) {
		return 0, "", nil, fmt.Errorf("%w: shared-memory message: %s", errMalformed, fmt.Sprintf(format, a...))
	}
	switch {
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		return bad("truncated (flags %#x)", flags)
	case n < shmHeaderLen:
		return bad("%d bytes", n)
	case binary.BigEndian.Uint32(buf[0:]) != shmMagic:
		return bad("bad magic %#08x", binary.BigEndian.Uint32(buf[0:]))
	case buf[4] != shmVersion && buf[4] != shmVersionV1:
		return bad("unsupported version %d", buf[4])
	}
	version := buf[4]
	kind = buf[5]
	nameLen := int(binary.BigEndian.Uint16(buf[6:]))
	size := binary.BigEndian.Uint64(buf[8:])
	off := binary.BigEndian.Uint64(buf[16:])
	switch kind {
	case shmSynced:
		if n != shmHeaderLen || len(fds) != 0 {
			return bad("SYNCED with %d bytes and %d descriptors", n, len(fds))
		}
		return kind, "", nil, nil
	case shmSegment, shmGone:
	default:
		return bad("unknown kind %d", kind)
	}
	if nameLen < 1 || nameLen > MaxNameLen || n != shmHeaderLen+nameLen {
		return bad("name length %d in %d bytes", nameLen, n)
	}
	name = string(buf[shmHeaderLen:n])
	if kind == shmGone {
		if len(fds) != 0 {
			return bad("GONE with descriptors")
		}
		return kind, name, nil, nil
	}
	want := 2 // the segment's memfd and its free table's
	if version == shmVersionV1 {
		want = 1
	}
	if len(fds) != want {
		return bad("version %d segment %q with %d descriptors, want %d", version, name, len(fds), want)
	}
	seg, err = mapShared(fds[0], name, off, size)
	if err != nil {
		return 0, "", nil, err
	}
	if want == 2 {
		if seg.frees, err = mapFrees(fds[1], name, size); err != nil {
			seg.unmap()
			return 0, "", nil, err
		}
	}
	return kind, name, seg, nil
}

// mapShared maps [off, off+size) of fd, checked against the file's size.
func mapShared(fd int, name string, off, size uint64) (*shmSeg, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shared segment %q: stat: %w", name, err)
	}
	fsize := uint64(st.Size)
	if size == 0 || off > fsize || size > fsize-off {
		return nil, fmt.Errorf("%w: shared segment %q: range offset=%d size=%d outside its %d-byte file", errMalformed, name, off, size, fsize)
	}
	start := off &^ (shmAlign - 1)
	end := min(roundUp(off+size, shmAlign), roundUp(fsize, uint64(os.Getpagesize())))
	// MAP_POPULATE builds the page tables now, not on the data path.
	mapping, err := unix.Mmap(fd, int64(start), int(end-start), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("shared segment %q: mmap: %w", name, err)
	}
	lo := off - start
	return &shmSeg{mapping: mapping, mem: mapping[lo : lo+size : lo+size]}, nil
}

func roundUp(n, to uint64) uint64 { return (n + to - 1) / to * to }

// sameHostAddr reports whether host:port names this host: a loopback
// address or one of its interfaces' addresses (in this network namespace).
func sameHostAddr(ep string) bool {
	addr, _ := splitEndpoint(ep)
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// errNotAdmitted marks a shared-memory or RDMA request its segment's free
// table did not admit (freeView.admits, rdmaTransport.admitted); it goes
// over TCP instead.
var errNotAdmitted = errors.New("not admitted by the segment's free table (its grant may be revoked)")

func notAdmitted(req *Request, via string) error {
	return fmt.Errorf("%w: %w", kverr.New(kverr.TransferFail, "", "transfer: %s segment %q on %s over %s; over TCP instead",
		req.Op, req.Segment, req.Endpoint, via), errNotAdmitted)
}

// copyShared moves r through segment s of mapping sp. ok is false when the
// segment was unmapped meanwhile (the caller goes over TCP instead).
func (t *localTransport) copyShared(r *reqState, sp *shmPeer, s *shmSeg) (ok bool, err error) {
	req := &r.req
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mem == nil {
		return false, nil
	}
	n := uint64(len(req.Buf))
	if err := checkRange(req.Segment, uint64(len(s.mem)), req.Offset, n); err != nil {
		return true, err
	}
	mem := s.mem[req.Offset : req.Offset+n]
	switch {
	case req.Op == Read:
		if r.wantSum() {
			r.crc = copyCRCParallel(req.Buf, mem)
		} else {
			copy(req.Buf, mem)
		}
		// After the copy: a free published meanwhile voids what it read.
		if s.frees != nil && !s.frees.admits(req.Grant, time.Now().UnixNano()) {
			return true, notAdmitted(req, "shared memory")
		}
	default:
		if s.frees != nil && !s.frees.admits(req.Grant, time.Now().UnixNano()) {
			return true, notAdmitted(req, "shared memory")
		}
		if r.wantSum() {
			r.crc = crc32c.Checksum(req.Buf)
		}
		// Segment memory is written once per put and read later, mostly by
		// other processes: past the cache (see internal/memcopy).
		memcopy.NonTemporal(mem, req.Buf)
		if sp.dead.Load() {
			// The peer went away during the copy (even if a new mapping of
			// its successor exists by now): the bytes may have landed in
			// memory nobody serves any more.
			return true, kverr.New(kverr.TransferFail, "", "transfer: WRITE segment %q on %s: peer closed its shared memory during the copy", req.Segment, req.Endpoint)
		}
	}
	return true, nil
}
