package target

import (
	"context"
	"encoding/binary"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/nof/auth"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
)

// Register values.
const (
	ccEN       = 1 << 0
	ccSHNShift = 14
	cstsRDY    = 1 << 0
	cstsSHST2  = 2 << 2 // shutdown processing complete
	vsValue    = 0x00010300
)

// controller is one association: an admin queue plus its I/O queues.
type controller struct {
	t         *Target
	cntlid    uint16
	sub       *subsystem // nil for the discovery controller
	discovery bool
	hostNQN   string
	hostID    [16]byte

	mu        sync.Mutex // guards the fields below
	adminQ    *conn
	ioQ       map[uint16]*conn
	cc, csts  uint32
	kato      time.Duration // 0 = keep-alive disabled
	keepAlive atomic.Bool   // kato > 0, read without mu by the queues' deadline readers
	lastKA    time.Time
	nqGranted uint32 // Number of Queues feature as granted (0 = not yet)
	features  map[uint8]uint32
	aers      []uint16 // CIDs of outstanding Asynchronous Event Requests
}

func (c *controller) queues() []*conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	qs := []*conn{}
	if c.adminQ != nil {
		qs = append(qs, c.adminQ)
	}
	for _, q := range c.ioQ {
		qs = append(qs, q)
	}
	return qs
}

func (c *controller) removeIOQueue(q *conn) {
	c.mu.Lock()
	if c.ioQ[q.qid] == q {
		delete(c.ioQ, q.qid)
	}
	c.mu.Unlock()
}

func (c *controller) keepAliveExpired(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kato > 0 && now.Sub(c.lastKA) > c.kato
}

func (c *controller) hostStats() HostStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	hs := HostStats{CNTLID: c.cntlid, HostNQN: c.hostNQN, IOQueues: len(c.ioQ)}
	if c.sub != nil {
		hs.SubNQN = c.sub.nqn
	} else {
		hs.SubNQN = nvme.DiscoveryNQN
	}
	if c.adminQ != nil {
		hs.RemoteAddr = c.adminQ.remote
	}
	return hs
}

// roundKATO rounds a host's KATO up to the keep-alive granularity.
func (t *Target) roundKATO(ms uint32) time.Duration {
	d := time.Duration(ms) * time.Millisecond
	g := t.cfg.KeepAliveGranularity
	return (d + g - 1) / g * g
}

func invalidParam(ipo uint16, inData bool) *nvme.StatusError {
	e := nvme.Errf(nvme.SCTSpecific, nvme.SCConnectInvalidParam)
	e.DW0 = uint32(ipo)
	if inData {
		e.DW0 |= 1 << 16
	}
	return e
}

// fabrics handles Connect, Property Get/Set and Disconnect.
func (q *conn) fabrics(cmd *pdu.Command, data []byte) {
	switch cmd.FabricsType() {
	case nvme.FabricsConnect:
		dw0, err := q.connect(cmd, data)
		q.complete(cmd.CID, err, dw0, 0)
	case nvme.FabricsPropGet, nvme.FabricsPropSet:
		if q.ctrl == nil {
			q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCSequenceError), 0, 0)
			return
		}
		if q.qid != 0 {
			q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidOpcode), 0, 0)
			return
		}
		v, err := q.ctrl.property(cmd)
		q.complete(cmd.CID, err, uint32(v), uint32(v>>32))
	case nvme.FabricsAuthSend, nvme.FabricsAuthRecv:
		q.authCommand(cmd, data)
	case nvme.FabricsDisconnect:
		// Written before the close (complete may leave it to a scheduled
		// flush that the close would fail).
		cpl := q.completion(cmd.CID, nil, 0, 0)
		if q.w.Send(&cpl) == nil {
			q.w.Flush()
		}
		q.close()
	default:
		q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidOpcode), 0, 0)
	}
}

// connect implements Fabrics Connect (dynamic controller model).
func (q *conn) connect(cmd *pdu.Command, data []byte) (uint32, error) {
	t := q.t
	if q.ctrl != nil {
		return 0, nvme.Errf(nvme.SCTGeneric, nvme.SCSequenceError)
	}
	recfmt := uint16(cmd.CDW10)
	qid := uint16(cmd.CDW10 >> 16)
	sqsize := uint16(cmd.CDW11)
	cattr := uint8(cmd.CDW11 >> 16)
	if recfmt != 0 {
		return 0, nvme.Errf(nvme.SCTSpecific, nvme.SCConnectIncompatible)
	}
	cd, err := nvme.ParseConnectData(data)
	if err != nil {
		return 0, invalidParam(24, false) // SGL1 of the SQE does not describe 1024 bytes
	}
	if sqsize == 0 || int(sqsize) >= t.cfg.MaxQueueDepth {
		return 0, invalidParam(44, false)
	}
	// An empty Host NQN is what SPDK's tools send unless told one; SPDK's
	// target accepts it (it only needs the NUL), so a subsystem open to any
	// host does too. A subsystem with an allow list refuses it below as an
	// unknown host: an empty name can never be on the list.
	if cd.HostNQN != "" && !validNQN(cd.HostNQN) {
		return 0, invalidParam(512, true)
	}
	t.mu.Lock()
	var sub *subsystem
	discovery := cd.SubNQN == nvme.DiscoveryNQN
	if !discovery {
		sub = t.subsystems[cd.SubNQN]
		if sub == nil {
			t.mu.Unlock()
			return 0, invalidParam(256, true)
		}
		if !sub.allowed(cd.HostNQN) {
			t.mu.Unlock()
			if len(sub.hostSecrets) > 0 {
				t.authRefused.Add(1)
				t.cfg.Logger.Info("nvme auth: host has no secret", "host", cd.HostNQN, "subsystem", sub.nqn, "remote", q.remote)
			}
			e := nvme.Errf(nvme.SCTSpecific, nvme.SCConnectInvalidHost)
			e.DW0 = 1<<16 | 512
			return 0, e
		}
	}
	if qid == 0 {
		defer t.mu.Unlock()
		if cd.CNTLID != 0xFFFF {
			return 0, invalidParam(16, true)
		}
		id, ok := t.allocCntlidLocked()
		if !ok {
			return 0, nvme.Errf(nvme.SCTSpecific, nvme.SCConnectBusy)
		}
		ctrl := &controller{t: t, cntlid: id, sub: sub, discovery: discovery, hostNQN: cd.HostNQN, hostID: cd.HostID,
			adminQ: q, ioQ: map[uint16]*conn{}, features: map[uint8]uint32{}, lastKA: t.cfg.Clock.Now()}
		ctrl.kato = t.roundKATO(cmd.CDW12)
		if discovery && ctrl.kato == 0 {
			ctrl.kato = t.cfg.DiscoveryKATO
		}
		ctrl.keepAlive.Store(ctrl.kato > 0)
		t.ctrls[id] = ctrl
		q.setQueue(ctrl, 0, sqsize, cattr, 8192)
		return uint32(id) | q.startAuth(sub, cd.HostNQN), nil
	}
	ctrl := t.ctrls[cd.CNTLID]
	t.mu.Unlock()
	if ctrl == nil || ctrl.discovery || ctrl.sub != sub || ctrl.hostNQN != cd.HostNQN {
		return 0, invalidParam(16, true)
	}
	ctrl.mu.Lock()
	defer ctrl.mu.Unlock()
	if ctrl.cc&ccEN == 0 || ctrl.csts&cstsRDY == 0 {
		return 0, nvme.Errf(nvme.SCTGeneric, nvme.SCSequenceError)
	}
	if (ctrl.cc>>16)&0xF != 6 || (ctrl.cc>>20)&0xF != 4 {
		return 0, invalidParam(42, false) // IOSQES/IOCQES not 64/16 bytes
	}
	maxQ := uint32(t.cfg.MaxIOQueues)
	if ctrl.nqGranted != 0 {
		maxQ = ctrl.nqGranted&0xFFFF + 1
	}
	if uint32(qid) > maxQ || ctrl.ioQ[qid] != nil {
		return 0, invalidParam(42, false)
	}
	ctrl.ioQ[qid] = q
	q.setQueue(ctrl, qid, sqsize, cattr, t.cfg.InCapsuleDataSize)
	return uint32(ctrl.cntlid) | q.startAuth(sub, cd.HostNQN), nil
}

// startAuth readies a newly connected queue: open at once when its
// subsystem has no secrets, else waiting for the host to authenticate
// (returns the ATR bit for the Connect response). Every queue, admin and
// I/O, authenticates on its own, as Linux and SPDK hosts do.
func (q *conn) startAuth(sub *subsystem, host string) uint32 {
	if sub == nil || len(sub.hostSecrets) == 0 {
		q.authed = true
		return 0
	}
	q.authc = &auth.Controller{HostSecret: sub.hostSecrets[host], CtrlSecret: sub.ctrlSecrets[host], HostNQN: host, SubNQN: sub.nqn}
	return nvme.ConnectATR
}

// authExempt lists the fabrics commands an unauthenticated queue serves.
func authExempt(fctype uint8) bool {
	return fctype == nvme.FabricsConnect || fctype == nvme.FabricsAuthSend || fctype == nvme.FabricsAuthRecv ||
		fctype == nvme.FabricsDisconnect
}

// authCommand handles Authentication Send (a host message, in-capsule) and
// Authentication Receive (the controller's next message, as C2HData).
// Protocol failures complete the command successfully: the failure is the
// Failure1 message the next Receive returns.
func (q *conn) authCommand(cmd *pdu.Command, data []byte) {
	if q.ctrl == nil {
		q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCSequenceError), 0, 0)
		return
	}
	if q.authc == nil || uint8(cmd.CDW10>>24) != auth.SECP || uint8(cmd.CDW10>>8) != auth.SPSP0 || uint8(cmd.CDW10>>16) != auth.SPSP1 {
		q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField), 0, 0)
		return
	}
	n := int(cmd.CDW11) // transfer length (send) or allocation length (receive)
	if cmd.FabricsType() == nvme.FabricsAuthSend {
		if n == 0 || n > auth.MaxMessage || len(data) < n {
			q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField), 0, 0)
			return
		}
		q.authc.Send(data[:n])
		q.authUpdate()
		q.complete(cmd.CID, nil, 0, 0)
		return
	}
	if n == 0 || cmd.SGL.Type != pdu.SGLTransport || cmd.SGL.Len == 0 {
		q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField), 0, 0)
		return
	}
	out := q.authc.Receive()
	q.authUpdate()
	q.sendData(cmd.CID, out[:min(n, int(cmd.SGL.Len), len(out))])
}

// authUpdate opens or closes the queue after a message and counts the outcome.
func (q *conn) authUpdate() {
	was := q.authed
	q.authed = q.authc.Authenticated()
	if q.authed && !was {
		q.t.authOK.Add(1)
	}
	if err := q.authc.Err(); err != nil && err != q.authErred {
		q.authErred = err
		q.t.authFailed.Add(1)
		q.t.cfg.Logger.Info("nvme auth: host failed to authenticate", "host", q.authc.HostNQN, "qid", q.qid, "remote", q.remote, "err", err)
	}
}

func (q *conn) setQueue(ctrl *controller, qid, sqsize uint16, cattr uint8, icd int) {
	q.ctrl, q.qid, q.sqsize, q.sqFlowOff, q.icd = ctrl, qid, sqsize, cattr&0x4 != 0, icd
}

func (t *Target) capValue() uint64 {
	return uint64(t.cfg.MaxQueueDepth-1) | 1<<16 | 30<<24 | 1<<37 | 1<<59
}

// property implements Property Get/Set.
func (c *controller) property(cmd *pdu.Command) (uint64, error) {
	size8 := cmd.CDW10&0x7 == 1
	if cmd.CDW10&0x7 > 1 {
		return 0, invalidParam(40, false)
	}
	ofst := cmd.CDW11
	set := cmd.FabricsType() == nvme.FabricsPropSet
	if set {
		if ofst != nvme.PropCC || size8 {
			return 0, invalidParam(44, false)
		}
		c.setCC(cmd.CDW12)
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case ofst == nvme.PropCAP && size8:
		return c.t.capValue(), nil
	case ofst == nvme.PropVS && !size8:
		return vsValue, nil
	case ofst == nvme.PropCC && !size8:
		return uint64(c.cc), nil
	case ofst == nvme.PropCSTS && !size8:
		return uint64(c.csts), nil
	}
	return 0, invalidParam(44, false)
}

// setCC applies a CC write: enable, disable (reset) or shutdown.
func (c *controller) setCC(v uint32) {
	c.mu.Lock()
	old := c.cc
	c.cc = v
	shn := (v >> ccSHNShift) & 3
	switch {
	case shn != 0 && (old>>ccSHNShift)&3 == 0:
		c.mu.Unlock()
		// Shutdown: make written data durable, then report completion.
		// RDY stays as is, as SPDK reports (CSTS 0x9 after a normal shutdown).
		if c.sub != nil {
			for _, n := range c.sub.ns {
				n.ns.Flush(context.Background())
			}
		}
		c.mu.Lock()
		c.csts = c.csts&^(3<<2) | cstsSHST2
	case v&ccEN != 0 && old&ccEN == 0:
		c.csts = cstsRDY
	case v&ccEN == 0 && old&ccEN != 0:
		c.csts = 0 // controller reset
		c.aers = nil
	}
	c.mu.Unlock()
}

func (c *controller) enabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.csts&cstsRDY != 0 && c.cc&ccEN != 0
}

// admin handles one admin command (admin queue only).
func (c *controller) admin(q *conn, cmd *pdu.Command, data []byte) {
	if !c.enabled() {
		q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCSequenceError), 0, 0)
		return
	}
	var (
		dw0 uint32
		out []byte
		err error
	)
	switch cmd.Opcode {
	case nvme.AdminIdentify:
		out, err = c.identify(cmd)
	case nvme.AdminGetLogPage:
		out, err = c.getLogPage(q, cmd)
	case nvme.AdminSetFeatures:
		dw0, err = c.setFeatures(cmd)
	case nvme.AdminGetFeatures:
		dw0, err = c.getFeatures(cmd)
	case nvme.AdminKeepAlive:
		c.mu.Lock()
		c.lastKA = c.t.cfg.Clock.Now()
		c.mu.Unlock()
	case nvme.AdminAsyncEvent:
		c.mu.Lock()
		if len(c.aers) >= aerl+1 {
			err = nvme.Errf(nvme.SCTSpecific, nvme.SCAERLExceeded)
		} else {
			c.aers = append(c.aers, cmd.CID)
		}
		c.mu.Unlock()
		if err == nil {
			return // held open until an event (none are generated yet) or teardown
		}
	case nvme.AdminAbort:
		dw0 = 1 // command not aborted
	default:
		err = nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidOpcode)
	}
	if err == nil && out != nil {
		n := min(int(cmd.SGL.Len), len(out))
		if cmd.SGL.Type != pdu.SGLTransport || n == 0 {
			q.complete(cmd.CID, nvme.Errf(nvme.SCTGeneric, nvme.SCSGLLengthInvalid), 0, 0)
			return
		}
		q.sendData(cmd.CID, out[:n])
		return
	}
	q.complete(cmd.CID, err, dw0, 0)
}

// aerl is the 0's based limit of outstanding Asynchronous Event Requests.
const aerl = 3

func (c *controller) identifyController() []byte {
	t := c.t
	id := nvme.IdentifyController{
		Firmware: "kvtier1", RAB: 6, CMIC: 0x02, CNTLID: c.cntlid, Version: vsValue,
		CTRATT: 1, ACL: 3, AERL: aerl, FRMW: 0x03, LPA: 0x06, ELPE: 0,
		KAS:  uint16(t.cfg.KeepAliveGranularity / (100 * time.Millisecond)),
		SQES: 0x66, CQES: 0x44, MAXCMD: uint16(t.cfg.MaxQueueDepth),
		ONCS: 1<<2 | 1<<3, VWC: 0x05, SGLS: 0x00100001,
		IOCCSZ: uint32((64 + t.cfg.InCapsuleDataSize) / 16), IORCSZ: 1, MSDBD: 1,
	}
	for m := t.cfg.MaxTransfer / 4096; m > 1; m >>= 1 {
		id.MDTS++
	}
	if c.discovery {
		id.CtrlType = nvme.CtrlTypeDiscovery
		id.SubNQN = nvme.DiscoveryNQN
		// no I/O queues: no queue entry sizes, no in-capsule data block
		id.CMIC, id.ONCS, id.VWC, id.SQES, id.CQES = 0, 0, 0, 0, 0
		// It serves only the discovery log (0x70): no Commands Supported
		// and Effects page (LPA bit 1) and no firmware slots to update
		// (FRMW), as SPDK's discovery controller reports (LPA 0x04).
		id.LPA &^= 0x02
		id.FRMW = 0
		id.IOCCSZ, id.IORCSZ, id.MSDBD = 0, 0, 0
	} else {
		id.CtrlType = nvme.CtrlTypeIO
		id.Serial, id.Model, id.SubNQN = c.sub.serial, c.sub.model, c.sub.nqn
		id.NN = uint32(len(c.sub.ns))
	}
	return id.Marshal()
}

func (c *controller) identify(cmd *pdu.Command) ([]byte, error) {
	cns := uint8(cmd.CDW10)
	if cns == 1 {
		return c.identifyController(), nil
	}
	csi := uint8(cmd.CDW11 >> 24)
	if cns == 6 && !c.discovery && csi == 0 {
		// I/O command set specific controller data for the NVM command set:
		// no limits to report, all zero.
		return make([]byte, nvme.IdentifyLen), nil
	}
	if c.discovery || (cns != 0 && cns != 2 && cns != 3 && !(cns == 5 && csi == 0)) {
		return nil, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField)
	}
	if cns == 2 {
		if cmd.NSID >= 0xFFFFFFFE {
			return nil, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidNamespace)
		}
		ids := make([]uint32, 0, len(c.sub.ns))
		for _, n := range c.sub.ns {
			ids = append(ids, n.nsid)
		}
		return nvme.ActiveNSList(ids, cmd.NSID), nil
	}
	n := c.sub.namespace(cmd.NSID)
	if n == nil {
		return nil, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidNamespace)
	}
	if cns == 3 {
		return nvme.NSDescriptors(n.nguid, n.uuid), nil
	}
	if cns == 5 {
		return make([]byte, nvme.IdentifyLen), nil // NVM command set namespace data: nothing beyond CNS 0
	}
	bs := n.ns.BlockSize()
	blocks := uint64(n.ns.Size()) / uint64(bs)
	idns := nvme.IdentifyNamespace{NSZE: blocks, NCAP: blocks, NUSE: blocks, NMIC: 1, NGUID: n.nguid}
	for ; 1<<idns.LBADS < bs; idns.LBADS++ {
	}
	if _, ok := n.ns.(namespace.Deallocator); ok {
		idns.NSFEAT |= 1 << 0 // thin provisioning
	}
	return idns.Marshal(), nil
}

func (c *controller) setFeatures(cmd *pdu.Command) (uint32, error) {
	fid := uint8(cmd.CDW10)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch fid {
	case nvme.FeatNumQueues:
		if c.discovery {
			return 0, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField)
		}
		nsq, ncq := cmd.CDW11&0xFFFF, cmd.CDW11>>16
		if nsq == 0xFFFF || ncq == 0xFFFF {
			return 0, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField)
		}
		if c.nqGranted == 0 {
			// Grant the maximum whatever was asked (as SPDK and Linux nvmet
			// do); the host uses min(asked, granted).
			lim := uint32(c.t.cfg.MaxIOQueues - 1)
			c.nqGranted = lim<<16 | lim
		}
		return c.nqGranted, nil
	case nvme.FeatKeepAlive:
		c.kato = c.t.roundKATO(cmd.CDW11)
		c.keepAlive.Store(c.kato > 0)
		c.lastKA = c.t.cfg.Clock.Now()
		return 0, nil
	case nvme.FeatAsyncEvent, nvme.FeatArbitration, nvme.FeatPowerMgmt, nvme.FeatTempThreshold,
		nvme.FeatErrorRecovery, nvme.FeatVolatileWC, nvme.FeatIRQCoalescing:
		c.features[fid] = cmd.CDW11
		return 0, nil
	}
	return 0, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField)
}

func (c *controller) getFeatures(cmd *pdu.Command) (uint32, error) {
	fid := uint8(cmd.CDW10)
	sel := (cmd.CDW10 >> 8) & 7
	c.mu.Lock()
	defer c.mu.Unlock()
	if sel == 3 { // supported capabilities: changeable, not saveable
		return 1 << 2, nil
	}
	switch fid {
	case nvme.FeatNumQueues:
		if c.nqGranted == 0 || sel == 1 {
			lim := uint32(c.t.cfg.MaxIOQueues - 1)
			return lim<<16 | lim, nil
		}
		return c.nqGranted, nil
	case nvme.FeatKeepAlive:
		return uint32(c.kato / time.Millisecond), nil
	case nvme.FeatVolatileWC:
		if v, ok := c.features[fid]; ok && sel == 0 {
			return v, nil
		}
		return 1, nil
	case nvme.FeatTempThreshold:
		if v, ok := c.features[fid]; ok && sel == 0 {
			return v, nil
		}
		return 0x0157, nil // 343 K
	case nvme.FeatAsyncEvent, nvme.FeatArbitration, nvme.FeatPowerMgmt, nvme.FeatErrorRecovery, nvme.FeatIRQCoalescing:
		if sel == 0 {
			return c.features[fid], nil
		}
		return 0, nil
	}
	return 0, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField)
}

func (c *controller) getLogPage(q *conn, cmd *pdu.Command) ([]byte, error) {
	lid := uint8(cmd.CDW10)
	numd := (uint64(cmd.CDW11&0xFFFF)<<16 | uint64(cmd.CDW10>>16)) + 1
	off := uint64(cmd.CDW12) | uint64(cmd.CDW13)<<32
	var page []byte
	switch {
	case lid == nvme.LogDiscovery && c.discovery:
		page = c.t.discoveryLog(c.hostNQN, q)
	case c.discovery:
		return nil, nvme.Errf(nvme.SCTSpecific, nvme.SCInvalidLogPage)
	case lid == nvme.LogError:
		page = make([]byte, 64)
	case lid == nvme.LogSMART:
		page = c.smartLog()
	case lid == nvme.LogFirmware:
		page = make([]byte, 512)
		page[0] = 1
		copy(page[8:16], "kvtier1 ")
	case lid == nvme.LogEffects:
		page = make([]byte, 4096)
		for _, op := range []uint8{nvme.AdminGetLogPage, nvme.AdminIdentify, nvme.AdminAbort, nvme.AdminSetFeatures,
			nvme.AdminGetFeatures, nvme.AdminAsyncEvent, nvme.AdminKeepAlive} {
			page[4*int(op)] = 1
		}
		for _, op := range []uint8{nvme.CmdFlush, nvme.CmdWrite, nvme.CmdRead, nvme.CmdWriteZeroes, nvme.CmdDSM} {
			binary.LittleEndian.PutUint32(page[1024+4*int(op):], 1|uint32(op&1)<<1) // CSUPP, LBCC for writes
		}
	default:
		return nil, nvme.Errf(nvme.SCTSpecific, nvme.SCInvalidLogPage)
	}
	if off&3 != 0 || off > uint64(len(page)) {
		return nil, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField)
	}
	want := numd * 4
	if want > uint64(c.t.cfg.MaxTransfer) {
		return nil, nvme.Errf(nvme.SCTGeneric, nvme.SCInvalidField)
	}
	out := make([]byte, want)
	copy(out, page[off:])
	return out, nil
}

func (c *controller) smartLog() []byte {
	b := make([]byte, 512)
	binary.LittleEndian.PutUint16(b[1:], 300) // composite temperature, Kelvin
	b[3], b[4] = 100, 10                      // available spare, threshold
	var rd, wr, rops, wops uint64
	for _, n := range c.sub.ns {
		rd += n.readBytes.Load()
		wr += n.writeBytes.Load()
		rops += n.readOps.Load()
		wops += n.writeOps.Load()
	}
	binary.LittleEndian.PutUint64(b[32:], (rd/512+999)/1000) // data units read (1000 × 512 B)
	binary.LittleEndian.PutUint64(b[48:], (wr/512+999)/1000)
	binary.LittleEndian.PutUint64(b[64:], rops)
	binary.LittleEndian.PutUint64(b[80:], wops)
	return b
}

// discoveryLog lists every NVM subsystem hostNQN may connect to, once per
// listener (wildcard listeners are reported with the address the discovery
// connection arrived on).
func (t *Target) discoveryLog(hostNQN string, q *conn) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	var addrs []*net.TCPAddr
	for ln := range t.listeners {
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			addrs = append(addrs, a)
		}
	}
	local, _ := q.nc.LocalAddr().(*net.TCPAddr)
	slices.SortFunc(addrs, func(a, b *net.TCPAddr) int { return strings.Compare(a.String(), b.String()) })
	var entries []nvme.DiscoveryEntry
	nqns := make([]string, 0, len(t.subsystems))
	for n := range t.subsystems {
		nqns = append(nqns, n)
	}
	slices.Sort(nqns)
	for _, n := range nqns {
		s := t.subsystems[n]
		if !s.allowed(hostNQN) {
			continue
		}
		for i, a := range addrs {
			ip := a.IP
			if ip.IsUnspecified() && local != nil {
				ip = local.IP
			}
			fam := uint8(1)
			if ip.To4() == nil {
				fam = 2
			}
			entries = append(entries, nvme.DiscoveryEntry{TrType: 3, AdrFam: fam, SubType: 2, TReq: 2, PortID: uint16(i),
				CNTLID: 0xFFFF, ASQSZ: uint16(t.cfg.MaxQueueDepth), TrSvcID: strconv.Itoa(a.Port), SubNQN: n, TrAddr: ip.String()})
		}
	}
	return nvme.DiscoveryLog(t.genctr, entries)
}
