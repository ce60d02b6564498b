package rest

import (
	"math"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// NVMeJSON is GET /api/v1/nvme: every appliance that exports namespaces over
// its built-in NVMe/TCP target, as of its last heartbeat, and totals.
type NVMeJSON struct {
	Appliances []NVMeApplianceJSON `json:"appliances"`
	Totals     NVMeTotalsJSON      `json:"totals"`
}

// NVMeApplianceJSON is one appliance's target.
type NVMeApplianceJSON struct {
	Node          string              `json:"node"`
	State         string              `json:"state"` // live | grace | gone (figures are the last reported)
	LastHeartbeat *time.Time          `json:"last_heartbeat,omitempty"`
	SinceSeconds  float64             `json:"seconds_since_heartbeat"`
	Addr          string              `json:"addr"` // NVMe/TCP listener host:port
	Subsystems    []NVMeSubsystemJSON `json:"subsystems"`
	Hosts         []NVMeHostJSON      `json:"hosts"`
	Auth          NVMeAuthJSON        `json:"auth"`
}

// NVMeAuthJSON counts in-band authentication (DH-HMAC-CHAP) outcomes.
type NVMeAuthJSON struct {
	Succeeded uint64 `json:"succeeded"` // queues that authenticated
	Failed    uint64 `json:"failed"`    // failed transactions (wrong secret...)
	Refused   uint64 `json:"refused"`   // hosts without a secret, commands before authentication
}

// NVMeSubsystemJSON is one exported subsystem.
type NVMeSubsystemJSON struct {
	NQN        string              `json:"nqn"`
	Namespaces []NVMeNamespaceJSON `json:"namespaces"`
}

// NVMeNamespaceJSON is one namespace: size and I/O counters (totals since the
// target started; sizes and byte counts in bytes).
type NVMeNamespaceJSON struct {
	NSID       uint32 `json:"nsid"`
	Size       uint64 `json:"size"`
	BlockSize  uint32 `json:"block_size"`
	Blocks     uint64 `json:"blocks"`
	ReadOps    uint64 `json:"read_ops"`
	ReadBytes  uint64 `json:"read_bytes"`
	WriteOps   uint64 `json:"write_ops"`
	WriteBytes uint64 `json:"write_bytes"`
	OtherOps   uint64 `json:"other_ops"` // flush, write zeroes, deallocate
	Errors     uint64 `json:"errors"`
	// Segment is the NOF segment the master places replicas in for this
	// namespace (nil when none is mounted).
	Segment *NVMeSegmentJSON `json:"segment,omitempty"`
}

// NVMeSegmentJSON is the master's view of a namespace mounted as a NOF segment.
type NVMeSegmentJSON struct {
	Name     string `json:"name"`
	NamePath string `json:"name_path"`
	State    string `json:"state"`
	Used     uint64 `json:"used"` // bytes allocated to NOF replicas
	Replicas uint64 `json:"replicas"`
}

// NVMeHostJSON is one connected host controller.
type NVMeHostJSON struct {
	CNTLID     uint32 `json:"cntlid"`
	HostNQN    string `json:"host_nqn"`
	SubNQN     string `json:"sub_nqn"`
	RemoteAddr string `json:"remote_addr"`
	IOQueues   uint32 `json:"io_queues"`
}

// NVMeTotalsJSON adds up every appliance.
type NVMeTotalsJSON struct {
	Appliances int    `json:"appliances"`
	Subsystems int    `json:"subsystems"`
	Namespaces int    `json:"namespaces"`
	Hosts      int    `json:"hosts"`
	Capacity   uint64 `json:"capacity"`
	ReadOps    uint64 `json:"read_ops"`
	ReadBytes  uint64 `json:"read_bytes"`
	WriteOps   uint64 `json:"write_ops"`
	WriteBytes uint64 `json:"write_bytes"`
	OtherOps   uint64 `json:"other_ops"`
	Errors     uint64 `json:"errors"`
}

// nofKey finds the NOF segment of a namespace.
type nofKey struct {
	owner, nqn string
	nsid       uint32
}

func (s *Server) nvme(c echo.Context) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	cl, err := s.ms.ListClients(ctx, &kvtierpb.Empty{})
	if err != nil {
		return err
	}
	sl, err := s.ms.ListSegments(ctx, &kvtierpb.Empty{})
	if err != nil {
		return err
	}
	segs := map[nofKey]*kvtierpb.SegmentInfo{}
	for _, si := range sl.GetSegments() {
		if sg := si.GetSegment(); sg.GetType() == kvtierpb.ReplicaType_NOF {
			segs[nofKey{sg.GetNode(), sg.GetNqn(), sg.GetNsid()}] = si
		}
	}
	now := s.clk.Now()
	out := NVMeJSON{Appliances: []NVMeApplianceJSON{}}
	t := &out.Totals
	for _, ci := range cl.GetClients() {
		nv := ci.GetNvme()
		if nv == nil {
			continue
		}
		a := NVMeApplianceJSON{Node: ci.GetClientId(), State: clientState(ci.GetState()),
			LastHeartbeat: msTime(ci.GetLastHeartbeatMs()), Addr: nv.GetAddr(),
			Subsystems: []NVMeSubsystemJSON{}, Hosts: []NVMeHostJSON{},
			Auth: NVMeAuthJSON{Succeeded: nv.GetAuthSucceeded(), Failed: nv.GetAuthFailed(), Refused: nv.GetAuthRefused()}}
		if a.LastHeartbeat != nil {
			a.SinceSeconds = math.Max(0, now.Sub(*a.LastHeartbeat).Seconds())
		}
		for _, sub := range nv.GetSubsystems() {
			sj := NVMeSubsystemJSON{NQN: sub.GetNqn(), Namespaces: []NVMeNamespaceJSON{}}
			for _, ns := range sub.GetNamespaces() {
				nj := NVMeNamespaceJSON{NSID: ns.GetNsid(), Size: ns.GetSize(), BlockSize: ns.GetBlockSize(),
					ReadOps: ns.GetReadOps(), ReadBytes: ns.GetReadBytes(), WriteOps: ns.GetWriteOps(),
					WriteBytes: ns.GetWriteBytes(), OtherOps: ns.GetOtherOps(), Errors: ns.GetErrors()}
				if nj.BlockSize > 0 {
					nj.Blocks = nj.Size / uint64(nj.BlockSize)
				}
				if si := segs[nofKey{ci.GetClientId(), sub.GetNqn(), ns.GetNsid()}]; si != nil {
					name := si.GetSegment().GetName()
					nj.Segment = &NVMeSegmentJSON{Name: name, NamePath: escapeSegment(name), State: segmentState(si.GetState()),
						Used: si.GetUsed(), Replicas: si.GetReplicas()}
				}
				sj.Namespaces = append(sj.Namespaces, nj)
				t.Namespaces++
				t.Capacity += nj.Size
				t.ReadOps += nj.ReadOps
				t.ReadBytes += nj.ReadBytes
				t.WriteOps += nj.WriteOps
				t.WriteBytes += nj.WriteBytes
				t.OtherOps += nj.OtherOps
				t.Errors += nj.Errors
			}
			a.Subsystems = append(a.Subsystems, sj)
			t.Subsystems++
		}
		for _, h := range nv.GetHosts() {
			a.Hosts = append(a.Hosts, NVMeHostJSON{CNTLID: h.GetCntlid(), HostNQN: h.GetHostNqn(), SubNQN: h.GetSubNqn(),
				RemoteAddr: h.GetRemoteAddr(), IOQueues: h.GetIoQueues()})
		}
		t.Hosts += len(a.Hosts)
		out.Appliances = append(out.Appliances, a)
	}
	t.Appliances = len(out.Appliances)
	return c.JSON(http.StatusOK, out)
}
