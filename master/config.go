package master

import (
	"fmt"
	"math"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
)

// Defaults applied to zero fields of Config.
const (
	DefaultLeaseTTL          = 5 * time.Second
	DefaultPutDiscardTimeout = 30 * time.Second
	DefaultPutReleaseTimeout = 10 * time.Minute
	DefaultSoftPinTTL        = 30 * time.Minute
	DefaultMaxSoftPinTTL     = 24 * time.Hour
	DefaultClientTTL         = 10 * time.Second
	DefaultClientGrace       = 30 * time.Second
	DefaultRemoveSyncTimeout = 5 * time.Second
	DefaultRestartTakeover   = 3 * time.Second
	DefaultDiskRegisterWait  = 2 * time.Minute
	DefaultHighWatermark     = 0.90
	DefaultEvictionRatio     = 0.05
	DefaultEvictInterval     = 5 * time.Millisecond
	// DefaultLeasePolicy is the one place the default eviction-order policy is
	// chosen (the trace-replay numbers decide it).
	DefaultLeasePolicy = PolicyFrequency
	// DefaultFrequencyBonus and DefaultFrequencyMaxBonus were chosen with the
	// replay simulator on both FAST'25 traces (trace time at speed 1; see the
	// package doc, "Eviction history" and "Eviction order"). Both are upper
	// bounds: a pass also bounds the bonus of every read after the first by
	// FrequencyExtraLifetimes DRAM lifetimes.
	DefaultFrequencyBonus    = 270 * time.Second
	DefaultFrequencyMaxBonus = 330 * time.Second
	DefaultOffloadMode       = OffloadImmediate
	DefaultMaxObjects        = 100_000_000
	// DefaultMaxKeyLen is the documented maximum key length (bytes). Keys of
	// exactly this length work; longer ones are INVALID_KEY.
	DefaultMaxKeyLen         = 4096
	DefaultMaxReplicas       = 8
	DefaultSSDPolicy         = "fifo"
	DefaultSSDHighWatermark  = 0.90
	DefaultOffloadQueueLimit = 65536
	DefaultOffloadTimeout    = 5 * time.Minute
	DefaultPutSpaceWait      = 500 * time.Millisecond
	DefaultEventBuffer       = 1024
	DefaultPutEventSample    = 64
	// DefaultTenant is used when a call carries no tenant.
	DefaultTenant = "default"
	// MaxTenantLen bounds tenant names (they are stored length-prefixed in one byte).
	MaxTenantLen = 255
)

// Lease policy names.
const (
	PolicyPlain     = "plain"
	PolicyFrequency = "frequency"
)

// Offload modes.
const (
	OffloadImmediate = "immediate"
	OffloadOnEvict   = "on-evict"
	OffloadOff       = "off"
)

// Config configures a Master. The zero value means defaults everywhere.
// DefaultDramSyncTimeout is Config.DramSyncTimeout's default.
const DefaultDramSyncTimeout = 2 * time.Second

type Config struct {
	LeaseTTL          time.Duration // read lease granted by GetReplicaList
	PutDiscardTimeout time.Duration // an in-flight put older than this may be taken over
	PutReleaseTimeout time.Duration // an abandoned reservation is freed this long after its PutStart
	SoftPinTTL        time.Duration // default soft-pin duration, counted from PutEnd
	MaxSoftPinTTL     time.Duration // largest soft-pin TTL a put may ask for
	ClientTTL         time.Duration // silent this long → GRACE (suspect); sooner (2.5 beat periods) for a client that reports its period
	ClientGrace       time.Duration // silent TTL+grace → GONE (segments unmounted, puts revoked)
	// RemoveSyncTimeout bounds how long a remove waits on appliances: for
	// an SSD copy being made to land (the copy is then removed too), for
	// those holding SSD copies to confirm their deletion durably and those
	// holding DRAM directory entries to drop them, one bound for all
	// (doc.go, "Removals"); < 0: removals are queued but not waited for,
	// nor are copies being made (tests whose appliances do not take
	// removals).
	RemoveSyncTimeout time.Duration
	// RestartTakeover: a new incarnation of a known appliance name takes
	// over once the old one has been silent this long (doc.go, "Appliance
	// identity").
	RestartTakeover time.Duration
	// DiskRegisterWait bounds a restarted appliance's re-registration of
	// its SSD copies (RegisterDiskObjects until its last call): past it the
	// copies it has not registered are dropped as if it had finished
	// (diskindex.go, "Restarts"); default 2 min.
	DiskRegisterWait time.Duration
	// DramSyncTimeout bounds how long PutEnd waits for the appliances
	// holding the MEMORY replicas to record the put in their DRAM
	// directories (dramdir.go); default 2 s. Past it the put still
	// succeeds, counted in dram_commits_unconfirmed. < 0: never wait (a
	// put acknowledged just before a master's death may then be lost).
	DramSyncTimeout time.Duration
	// RebuildWait bounds how long segments re-announced to a master that
	// did not know their appliance wait for its DRAM directory report
	// before taking allocations; default 10 s.
	RebuildWait time.Duration
	// RebuildWindow: once an appliance reports DRAM objects this master
	// never knew (it replaced a master), reads that miss answer
	// UNAVAILABLE_IN_CURRENT_STATUS (retry) until this long after the
	// master started, so appliances not heard from yet can report; default
	// 3 s (appliances beat every second).
	RebuildWindow time.Duration
	// LeaderEpoch is reported with every PutEnd (HA: the election's epoch;
	// 0 for a single master).
	LeaderEpoch int64

	HighWatermark     float64       // MEMORY use fraction that triggers eviction
	EvictionRatio     float64       // fraction of MEMORY capacity a pass frees at least
	EvictInterval     time.Duration // how often the evictor checks the watermark while use is above its trigger (below it: woken by allocations, evictor.go)
	LeasePolicy       string        // "plain" | "frequency"
	FrequencyBonus    time.Duration // frequency policy: order bonus per read (upper bound; see FrequencyPolicy)
	FrequencyMaxBonus time.Duration // frequency policy: cap of the bonus
	// EvictionHistory is how many evicted keys' read counts the master
	// remembers (entries, FIFO, ~12 heap bytes each; split over 256 shards,
	// so rounded up to a multiple of 256) so a re-put of a hot
	// key starts at count+1. 0 = default: EvictionHistoryPerObject × the
	// objects in DRAM at the largest eviction pass, at least 4,096 and at
	// most 4,000,000; < 0 = none.
	EvictionHistory   int
	OffloadMode       string        // "immediate" | "on-evict" | "off"
	ForceEvict        bool          // free MEMORY even when an offload is pending
	OffloadQueueLimit int           // bounded offload queue (tasks not yet dispatched)
	OffloadTimeout    time.Duration // a dispatched task not reported done by then fails
	// PutSpaceWait is the longest a PutStart that found DRAM full waits for
	// offloads in flight to make objects evictable before it answers
	// NO_AVAILABLE_HANDLE; < 0: never wait.
	PutSpaceWait time.Duration
	// GrantKeyRotation is how often each storage node's data-plane grant
	// secret is replaced (grants.go; default DefaultGrantKeyRotation).
	GrantKeyRotation time.Duration
	// PutTicketLife is how long a direct put's ticket lasts (directput.go;
	// default PutTicketLife).
	PutTicketLife time.Duration
	// DisableGrants hands out no grant keys and signs no replica: the
	// appliances' data ports stay open (benchmarks measure the grants'
	// cost against it).
	DisableGrants bool
	// RDMATrustedFabric hands out the RDMA offers nodes announce at mount.
	// An RDMA offer is a segment-wide rkey: whoever is handed a replica in
	// the segment can read and write all of it, past data-plane grants and
	// TLS. So while grants are enforced (DisableGrants false) the master
	// withholds the offers (clients use TCP, with grants) unless the
	// operator declares the RDMA fabric trusted (kvtier master
	// --rdma-trusted-fabric).
	RDMATrustedFabric bool

	MaxObjects  int               // object-count limit (like capacity)
	MaxKeyLen   int               // maximum key length in bytes (>= 4096)
	MaxReplicas int               // maximum replicas per put (MEMORY + NOF)
	TenantQuota map[string]uint64 // logical bytes per tenant; absent = unlimited

	// SSD settings relayed to appliances in every heartbeat response.
	SSDPolicy        string  // "fifo" | "lru"
	SSDCapacity      uint64  // 0 = the appliance's own configuration
	SSDHighWatermark float64 // (0,1]

	EventBuffer    int // per-subscriber event buffer
	PutEventSample int // one put event per this many puts

	Clock clock.Clock
}

// withDefaults returns c with zero fields replaced by defaults.
func (c Config) withDefaults() Config {
	d := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	d(&c.LeaseTTL, DefaultLeaseTTL)
	d(&c.PutDiscardTimeout, DefaultPutDiscardTimeout)
	d(&c.PutReleaseTimeout, DefaultPutReleaseTimeout)
	d(&c.SoftPinTTL, DefaultSoftPinTTL)
	d(&c.MaxSoftPinTTL, DefaultMaxSoftPinTTL)
	d(&c.ClientTTL, DefaultClientTTL)
	d(&c.ClientGrace, DefaultClientGrace)
	d(&c.RemoveSyncTimeout, DefaultRemoveSyncTimeout)
	d(&c.RestartTakeover, DefaultRestartTakeover)
	d(&c.DiskRegisterWait, DefaultDiskRegisterWait)
	d(&c.DramSyncTimeout, DefaultDramSyncTimeout)
	d(&c.RebuildWait, 10*time.Second)
	d(&c.RebuildWindow, 3*time.Second)
	d(&c.EvictInterval, DefaultEvictInterval)
	d(&c.FrequencyBonus, DefaultFrequencyBonus)
	d(&c.FrequencyMaxBonus, DefaultFrequencyMaxBonus)
	d(&c.OffloadTimeout, DefaultOffloadTimeout)
	d(&c.PutSpaceWait, DefaultPutSpaceWait)
	d(&c.GrantKeyRotation, DefaultGrantKeyRotation)
	d(&c.PutTicketLife, PutTicketLife)
	if c.HighWatermark == 0 {
		c.HighWatermark = DefaultHighWatermark
	}
	if c.EvictionRatio == 0 {
		c.EvictionRatio = DefaultEvictionRatio
	}
	if c.LeasePolicy == "" {
		c.LeasePolicy = DefaultLeasePolicy
	}
	if c.OffloadMode == "" {
		c.OffloadMode = DefaultOffloadMode
	}
	if c.OffloadQueueLimit == 0 {
		c.OffloadQueueLimit = DefaultOffloadQueueLimit
	}
	if c.MaxObjects == 0 {
		c.MaxObjects = DefaultMaxObjects
	}
	if c.MaxKeyLen == 0 {
		c.MaxKeyLen = DefaultMaxKeyLen
	}
	if c.MaxReplicas == 0 {
		c.MaxReplicas = DefaultMaxReplicas
	}
	if c.SSDPolicy == "" {
		c.SSDPolicy = DefaultSSDPolicy
	}
	if c.SSDHighWatermark == 0 {
		c.SSDHighWatermark = DefaultSSDHighWatermark
	}
	if c.EventBuffer == 0 {
		c.EventBuffer = DefaultEventBuffer
	}
	if c.PutEventSample == 0 {
		c.PutEventSample = DefaultPutEventSample
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

// Validate reports the first invalid field (after defaults) as INVALID_PARAMS.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(f string, a ...any) error { return kverr.New(kverr.InvalidParams, "", "config: "+f, a...) }
	for name, v := range map[string]time.Duration{
		"LeaseTTL": c.LeaseTTL, "PutDiscardTimeout": c.PutDiscardTimeout, "PutReleaseTimeout": c.PutReleaseTimeout,
		"SoftPinTTL": c.SoftPinTTL, "MaxSoftPinTTL": c.MaxSoftPinTTL, "ClientTTL": c.ClientTTL,
		"ClientGrace": c.ClientGrace, "EvictInterval": c.EvictInterval, "FrequencyBonus": c.FrequencyBonus,
		"FrequencyMaxBonus": c.FrequencyMaxBonus, "OffloadTimeout": c.OffloadTimeout, "RestartTakeover": c.RestartTakeover,
		"DiskRegisterWait": c.DiskRegisterWait, "RebuildWait": c.RebuildWait, "RebuildWindow": c.RebuildWindow,
		"GrantKeyRotation": c.GrantKeyRotation, "PutTicketLife": c.PutTicketLife,
	} {
		if v < 0 {
			return bad("%s must not be negative (got %v)", name, v)
		}
	}
	if c.PutReleaseTimeout < c.PutDiscardTimeout {
		return bad("PutReleaseTimeout (%v) must be >= PutDiscardTimeout (%v)", c.PutReleaseTimeout, c.PutDiscardTimeout)
	}
	if c.SoftPinTTL > c.MaxSoftPinTTL {
		return bad("SoftPinTTL (%v) above MaxSoftPinTTL (%v)", c.SoftPinTTL, c.MaxSoftPinTTL)
	}
	if err := validateDram(c.HighWatermark, c.EvictionRatio, c.LeasePolicy); err != nil {
		return err
	}
	if err := validateSSD(c.OffloadMode, c.SSDPolicy, c.SSDHighWatermark); err != nil {
		return err
	}
	if c.OffloadQueueLimit < 0 || c.MaxObjects < 0 || c.MaxReplicas < 0 || c.EventBuffer < 0 || c.PutEventSample < 0 {
		return bad("counts must not be negative")
	}
	if c.EvictionHistory > maxEvictionHistory {
		return bad("EvictionHistory %d above %d entries", c.EvictionHistory, maxEvictionHistory)
	}
	if c.MaxKeyLen < DefaultMaxKeyLen {
		return bad("MaxKeyLen %d below the documented minimum %d", c.MaxKeyLen, DefaultMaxKeyLen)
	}
	if c.MaxReplicas > 64 {
		return bad("MaxReplicas %d above 64", c.MaxReplicas)
	}
	for t := range c.TenantQuota {
		if t == "" || len(t) > MaxTenantLen {
			return bad("TenantQuota has an invalid tenant name %q", t)
		}
	}
	return nil
}

func validateDram(hw, ratio float64, policy string) error {
	if math.IsNaN(hw) || hw <= 0 || hw > 1 {
		return kverr.New(kverr.InvalidParams, "", "high watermark %v outside (0,1]", hw)
	}
	if math.IsNaN(ratio) || ratio <= 0 || ratio > 1 {
		return kverr.New(kverr.InvalidParams, "", "eviction ratio %v outside (0,1]", ratio)
	}
	if policy != PolicyPlain && policy != PolicyFrequency {
		return kverr.New(kverr.InvalidParams, "", "lease policy %q is not plain|frequency", policy)
	}
	return nil
}

func validateSSD(mode, policy string, hw float64) error {
	switch mode {
	case OffloadImmediate, OffloadOnEvict, OffloadOff:
	default:
		return kverr.New(kverr.InvalidParams, "", "offload mode %q is not off|immediate|on-evict", mode)
	}
	if policy != "fifo" && policy != "lru" {
		return kverr.New(kverr.InvalidParams, "", "ssd policy %q is not fifo|lru", policy)
	}
	if math.IsNaN(hw) || hw <= 0 || hw > 1 {
		return kverr.New(kverr.InvalidParams, "", "ssd high watermark %v outside (0,1]", hw)
	}
	return nil
}

// LeasePolicy orders eviction candidates. The lease itself (protection from
// eviction and non-forced Remove) is always last read + LeaseTTL; a policy
// only decides which lease-expired object goes first. Smaller keys are
// evicted first. Exported so the trace-replay simulator uses the very same
// ordering.
type LeasePolicy interface {
	// Name is "plain" or "frequency".
	Name() string
	// EvictionKey returns the order key of an object whose base is deadline
	// (unix nanoseconds: the lease deadline, or the completion time of an
	// object never read) and that was read readCount times.
	EvictionKey(deadline int64, readCount uint32) int64
}

// PlainPolicy orders by the lease deadline alone (near-LRU).
type PlainPolicy struct{}

// Name implements LeasePolicy.
func (PlainPolicy) Name() string { return PolicyPlain }

// EvictionKey implements LeasePolicy.
func (PlainPolicy) EvictionKey(deadline int64, _ uint32) int64 { return deadline }

// FrequencyPolicy adds a bonus that grows with the read count to the
// deadline so hot shared prefixes outlive one-off blocks:
//
//	bonus(r) = 0                                            r = 0
//	bonus(r) = min(r×Bonus, MaxBonus, Bonus + (r−1)×Extra)  r ≥ 1
//
// Bonus is what a first read earns (the protection horizon, in time: how
// long a reused block is kept after its last use); later reads only move
// the object ahead of objects read less often, and Extra bounds how far
// each one does. The master sets Extra per eviction pass from the DRAM
// tier's lifetime (ForLifetime, Turnover); Extra = 0 means no such bound.
type FrequencyPolicy struct {
	Bonus    time.Duration
	MaxBonus time.Duration
	Extra    time.Duration
}

// Name implements LeasePolicy.
func (FrequencyPolicy) Name() string { return PolicyFrequency }

// EvictionKey implements LeasePolicy.
// The bonus is exactly the formula above, computed without overflow; a
// non-positive Bonus or MaxBonus means no bonus.
func (p FrequencyPolicy) EvictionKey(deadline int64, readCount uint32) int64 {
	per, capB := int64(p.Bonus), int64(p.MaxBonus)
	if per <= 0 || capB <= 0 || readCount == 0 {
		return deadline
	}
	b := capB
	if int64(readCount) <= capB/per { // readCount×per ≤ capB (and does not overflow)
		b = int64(readCount) * per
	}
	if x := int64(p.Extra); x > 0 && int64(readCount-1) <= capB/x {
		b = min(b, per+int64(readCount-1)*x)
	}
	return deadline + b
}

var (
	_ LeasePolicy = PlainPolicy{}
	_ LeasePolicy = FrequencyPolicy{}
)

// NewLeasePolicy returns the policy with the given name.
func NewLeasePolicy(name string, bonus, maxBonus time.Duration) (LeasePolicy, error) {
	switch name {
	case PolicyPlain:
		return PlainPolicy{}, nil
	case PolicyFrequency:
		if bonus == 0 {
			bonus = DefaultFrequencyBonus
		}
		if maxBonus == 0 {
			maxBonus = DefaultFrequencyMaxBonus
		}
		return FrequencyPolicy{Bonus: bonus, MaxBonus: maxBonus}, nil
	}
	return nil, kverr.New(kverr.InvalidParams, "", "lease policy %q is not plain|frequency", name)
}

// String summarizes the main settings for start-up logs.
func (c Config) String() string {
	return fmt.Sprintf("lease=%v hw=%.2f ratio=%.2f policy=%s offload=%s", c.LeaseTTL, c.HighWatermark, c.EvictionRatio, c.LeasePolicy, c.OffloadMode)
}
