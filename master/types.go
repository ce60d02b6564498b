package master

import (
	"slices"
	"time"
)

// ReplicaType is where a replica lives. Numbers match the wire enum.
type ReplicaType uint8

// Replica types.
const (
	Memory    ReplicaType = 1
	NOF       ReplicaType = 2
	LocalDisk ReplicaType = 3
)

func (t ReplicaType) String() string {
	switch t {
	case Memory:
		return "MEMORY"
	case NOF:
		return "NOF"
	case LocalDisk:
		return "LOCAL_DISK"
	}
	return "UNSPECIFIED"
}

// ReplicaState is a replica's life-cycle state. Numbers match the wire enum.
type ReplicaState uint8

// Replica states.
const (
	Processing ReplicaState = 1
	Complete   ReplicaState = 2
	Failed     ReplicaState = 3
	Removed    ReplicaState = 4
)

func (s ReplicaState) String() string {
	switch s {
	case Processing:
		return "PROCESSING"
	case Complete:
		return "COMPLETE"
	case Failed:
		return "FAILED"
	case Removed:
		return "REMOVED"
	}
	return "UNSPECIFIED"
}

// Replica is one copy of an object, as the master reports it.
type Replica struct {
	Type       ReplicaType
	State      ReplicaState
	Segment    string // MEMORY/NOF: segment name; LOCAL_DISK: "<node>/ssd"
	Node       string // client id owning the storage
	Endpoint   string // transfer-engine address of that node
	Offset     uint64 // in segment (MEMORY/NOF) or in bucket (LOCAL_DISK)
	Length     uint64
	Bucket     uint64 // LOCAL_DISK
	NQN        string // NOF
	NSID       uint32 // NOF
	TargetAddr string // NOF
	// Unavailable (object info only): its node is not LIVE, so the replica
	// is kept but not handed out to readers.
	Unavailable bool
	// Offer (MEMORY) is the segment's transport offer, copied through.
	Offer TransportOffer
	// FreeSeq (MEMORY) is the seq of the last DRAM-directory free record
	// queued for its segment when the replica was read: the place its
	// grants carry in the owner's record stream (grant.Mark).
	FreeSeq uint64
}

// PutConfig is the per-put placement configuration.
type PutConfig struct {
	Replicas         int    // MEMORY replicas wanted (best effort)
	NOFReplicas      int    // NOF replicas wanted (best effort)
	PreferredSegment string // tried first when it has room
	SoftPin          bool
	HardPin          bool
	SoftPinTTL       time.Duration // 0 = Config.SoftPinTTL
	// OnlyNode places MEMORY replicas only on this node's segments, at
	// most one (a direct put: the node has the bytes; directput.go).
	OnlyNode string
	// HolderPulls (with OnlyNode): the node takes the commit record from
	// its outbox itself (DramRecordsConn.TryRecv), so queueing it wakes
	// none of its streams.
	HolderPulls bool
	// Stage (with OnlyNode and a checksum, one MEMORY replica) is the
	// node's token for bytes it holds already: PutStart then commits the
	// put at once (Master.PutStartStaged), the commit record carries the
	// token, and readers get the replica once the node acknowledged that
	// record (it copies the bytes in when it applies it).
	Stage uint64
}

// PutRequest starts a put.
type PutRequest struct {
	Client      string
	Tenant      string
	Key         string
	Size        uint64
	CRC32C      uint32
	HasChecksum bool
	Config      PutConfig
}

// PutResult is one result of BatchPutStart.
type PutResult struct {
	Replicas []Replica
	Err      error
}

// ReplicaList is what GetReplicaList returns.
type ReplicaList struct {
	Size          uint64
	CRC32C        uint32
	HasChecksum   bool
	LeaseDeadline time.Time
	Replicas      []Replica
}

// GetResult is one result of BatchGetReplicaList.
type GetResult struct {
	List ReplicaList
	Err  error
}

// SegmentState is a segment's state.
type SegmentState int32

// Segment states. Numbers match the wire enum.
const (
	SegMounted  SegmentState = 1
	SegDraining SegmentState = 2
	SegGrace    SegmentState = 3
)

func (s SegmentState) String() string {
	switch s {
	case SegMounted:
		return "MOUNTED"
	case SegDraining:
		return "DRAINING"
	case SegGrace:
		return "GRACE"
	}
	return "UNSPECIFIED"
}

// Segment describes mountable storage: a MEMORY segment of a node, or an NOF
// namespace range.
type Segment struct {
	Name       string
	Type       ReplicaType // Memory or NOF (0 means Memory)
	Node       string      // owning client (set from the caller when empty)
	Endpoint   string
	Base       uint64
	Size       uint64
	NQN        string
	NSID       uint32
	TargetAddr string
	BlockSize  uint32 // NOF allocation unit (0 = 4096)
	// Offer is what the node offers for the segment beyond TCP, as it
	// announced it at mount; copied into every replica, never read.
	Offer TransportOffer
	// DirectPut: the node's data port takes direct puts (announced at
	// mount; copied to ListSegments, never read). DirectPutLocal: it
	// places them with a master in its own process (the same).
	DirectPut, DirectPutLocal bool
}

// TransportOffer is a node's offer of transports beyond TCP for one
// segment (the transfer engine's SegmentOffer, api/kvtierpb Segment.rdma_*).
// The master stores and copies it; it never interprets it.
type TransportOffer struct {
	RDMAAddr      string
	RDMABase      uint64
	RDMAKey       uint32
	RDMAFreesBase uint64
	RDMAFreesKey  uint32
}

// SegmentInfo is a segment with its state and usage.
type SegmentInfo struct {
	Segment       Segment
	State         SegmentState
	Used          uint64
	LargestFree   uint64
	Replicas      uint64
	DrainDeadline time.Time // zero unless draining
}

// ClientState is a client's liveness state.
type ClientState int32

// Client states. Numbers match the wire enum.
const (
	ClientLive  ClientState = 1
	ClientGrace ClientState = 2
	ClientGone  ClientState = 3
)

func (s ClientState) String() string {
	switch s {
	case ClientLive:
		return "LIVE"
	case ClientGrace:
		return "GRACE"
	case ClientGone:
		return "GONE"
	}
	return "UNSPECIFIED"
}

// DiskStats are the SSD-tier figures an appliance reports.
type DiskStats struct {
	Capacity, Used, Buckets, Objects, OffloadQueue, EvictedBuckets uint64
	BytesWritten, BytesRead, QuarantinedBuckets                    uint64
	IndexLoaded                                                    bool
	OffloadSkipped, OffloadFailed                                  uint64
}

// ClientInfo describes a known client.
type ClientInfo struct {
	ID            string
	Endpoint      string
	Segments      []string
	LastHeartbeat time.Time
	State         ClientState
	Disk          DiskStats
	NVMe          *NVMeStats // last NVMe/TCP report; nil when the client exports none
	// Problems say why the client is not healthy (suspect, left, gone, or
	// what it reported itself); empty when it is.
	Problems []string
	// Storage: the client has mounted a segment or reported an SSD tier (an
	// appliance or a storage node, not a pure caller).
	Storage bool
}

// NVMeStats are the figures of a client's built-in NVMe/TCP target, as of
// its last heartbeat. Counters are totals since the target started.
type NVMeStats struct {
	Addr       string // listener host:port
	Subsystems []NVMeSubsystem
	Hosts      []NVMeHost // connected controllers
	// In-band authentication outcomes (nof/target AuthStats).
	AuthSucceeded, AuthFailed, AuthRefused uint64
}

// NVMeSubsystem is one exported subsystem and its namespaces.
type NVMeSubsystem struct {
	NQN        string
	Namespaces []NVMeNamespace
}

// NVMeNamespace is one namespace's size and I/O counters.
type NVMeNamespace struct {
	NSID                 uint32
	Size                 uint64 // bytes
	BlockSize            uint32 // bytes per logical block
	ReadOps, ReadBytes   uint64
	WriteOps, WriteBytes uint64
	OtherOps             uint64 // flush, write zeroes, deallocate
	Errors               uint64 // commands completed with an error status
}

// NVMeHost is one connected controller (association) of the target.
type NVMeHost struct {
	CNTLID     uint32
	HostNQN    string
	SubNQN     string // subsystem (or discovery) NQN it connected to
	RemoteAddr string
	IOQueues   uint32
}

// clone returns a deep copy, so a stored report never aliases a caller's.
func (s *NVMeStats) clone() *NVMeStats {
	if s == nil {
		return nil
	}
	out := &NVMeStats{Addr: s.Addr, Hosts: slices.Clone(s.Hosts), AuthSucceeded: s.AuthSucceeded, AuthFailed: s.AuthFailed, AuthRefused: s.AuthRefused}
	for _, sub := range s.Subsystems {
		out.Subsystems = append(out.Subsystems, NVMeSubsystem{NQN: sub.NQN, Namespaces: slices.Clone(sub.Namespaces)})
	}
	return out
}

// HeartbeatRequest is one beat of a client.
type HeartbeatRequest struct {
	Client       string
	Endpoint     string
	Segments     []Segment  // re-announced every beat
	Disk         *DiskStats // nil: no SSD tier report
	NVMe         *NVMeStats // nil: exports no NVMe/TCP namespace (clears the last report)
	OffloadSlots int
	// CachedReads are reads the client served from its lease cache since
	// its last beat; each counts as a read (GetReplicaList) would.
	CachedReads []CachedRead
	// Identity is the node's incarnation (identity.go); zero for nodes
	// that do not take part.
	Identity Identity
	// DramDirectory: the node keeps a DRAM directory and reports it to a
	// master that does not know it (dramdir.go).
	DramDirectory bool
	DramObjects   uint64 // objects in that directory
	// Interval is the client's beat period (0: unknown): silent for
	// SuspectBeats periods (at most ClientTTL) it is suspect (GRACE).
	Interval time.Duration
	// Leaving marks the last beat of a node shutting down: it is suspect at
	// once, its replicas kept but no longer handed out.
	Leaving bool
	// Unhealthy lists what the node itself reports broken (a listener
	// down, ...); empty: healthy.
	Unhealthy []string
}

// CachedRead is count reads of one object a client served by reusing a
// running read lease, the latest LastReadAge before the beat.
type CachedRead struct {
	Tenant      string
	Key         string
	Count       uint32
	LastReadAge time.Duration
}

// MaxCachedReads bounds the cached reads one heartbeat may report.
const MaxCachedReads = 1 << 16

// TierSettings are the SSD settings relayed to appliances.
type TierSettings struct {
	OffloadMode      string
	SSDPolicy        string
	SSDCapacity      uint64
	SSDHighWatermark float64
}

// DramSettings are the DRAM-tier settings.
type DramSettings struct {
	HighWatermark float64
	EvictionRatio float64
	LeasePolicy   string
}

// OffloadTask tells an appliance to copy one MEMORY replica to its SSD tier.
type OffloadTask struct {
	Tenant string
	Key    string
	Size   uint64
	CRC32C uint32
	Source Replica
}

// HeartbeatReply is the master's answer to a beat.
type HeartbeatReply struct {
	Known    bool // false: the client was unknown or GONE (re-register disk objects)
	Offload  []OffloadTask
	Settings TierSettings
	// ForgetDram: the client was GONE (its replicas dropped): its DRAM
	// directory is stale and must be cleared before it reports it.
	ForgetDram bool
}

// OffloadResult reports one finished offload task.
type OffloadResult struct {
	Client, Tenant, Key string
	OK                  bool
	Bucket, Offset      uint64
	Length              uint64
	Error               string
	// Retry (with !OK): skipped, not failed; the object keeps waiting for
	// its disk copy. A failure makes it evictable without one.
	Retry bool
}

// DiskObject is one object an appliance found on its SSD tier.
type DiskObject struct {
	Tenant, Key    string
	Size           uint64
	CRC32C         uint32
	Bucket, Offset uint64
	Length         uint64
}

// ListOptions select objects for ListObjects.
type ListOptions struct {
	Tenant     string
	Prefix     string
	Cursor     string // opaque; exclusive
	Limit      int    // 0 = 1000, at most 10000
	AllTenants bool
}

// ObjectInfo is an object's metadata for operators.
type ObjectInfo struct {
	Tenant, Key     string
	Size            uint64
	CRC32C          uint32
	HasChecksum     bool
	Writer          string
	Created         time.Time // PutEnd (zero while in flight)
	PutStarted      time.Time
	LeaseDeadline   time.Time // zero when never read
	SoftPin         bool
	SoftPinDeadline time.Time
	HardPin         bool
	ReadCount       uint64
	Replicas        []Replica
	Complete        bool
	OffloadPending  bool
}

// ObjectPage is one page of ListObjects.
type ObjectPage struct {
	Objects    []ObjectInfo
	NextCursor string // empty when done
}

// TierStats are the figures of one tier ("memory", "nof", "disk").
type TierStats struct {
	Tier                  string
	Capacity, Used        uint64
	Objects, Hits, Misses uint64
}

// Stats is the master's status.
type Stats struct {
	Objects   uint64
	Tiers     []TierStats
	Counters  map[string]uint64
	HeapBytes uint64
	Leader    bool
	// Rebuilding: the master waits for appliances' DRAM directory reports
	// (RebuildReason says whose).
	Rebuilding    bool
	RebuildReason string
}

// Tiers is the tier configuration and figures.
type Tiers struct {
	Dram  DramSettings
	SSD   TierSettings
	Stats []TierStats
}

// TierUpdate changes only the non-nil fields.
type TierUpdate struct {
	HighWatermark    *float64
	EvictionRatio    *float64
	LeasePolicy      *string
	OffloadMode      *string
	SSDPolicy        *string
	SSDCapacity      *uint64
	SSDHighWatermark *float64
}

// Event is something operators may want to see happen.
type Event struct {
	Time    time.Time
	Kind    string // put | remove | evict | offload | bucket_delete | segment | client | grant
	Tenant  string
	Key     string
	Segment string
	Node    string
	Bytes   uint64
	Message string
}

// EvictionReport describes one eviction pass.
type EvictionReport struct {
	Time            time.Time
	Target          uint64 // bytes the pass wanted to free
	FreedBytes      uint64
	FreedObjects    uint64
	Candidates      int
	SecondPass      bool // soft-pinned objects were considered
	Short           bool // freed less than Target
	Leased          uint64
	Pinned          uint64
	InFlight        uint64
	AwaitingOffload uint64
	AwaitingBytes   uint64 // MEMORY bytes queued for offload by this pass (freed later)
}
