package master

import (
	"context"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kvtier/kvtier/kverr"
)

const numShards = 256

// object is the per-object metadata, kept small: tens of millions of them
// may live in one master. Guarded by its shard's mutex.
type object struct {
	replicas   []replica
	writer     string // interned client id
	size       uint64
	started    int64  // PutStart, unix ns
	created    int64  // PutEnd, unix ns (0 while in flight)
	lastRead   int64  // last GetReplicaList, unix ns (0 = never read); while in flight or landing (flagLanding): the seq of its DRAM-directory commit record (0: none)
	softPinEnd int64  // soft-pin deadline; while in flight: the requested TTL in ns
	readCount  uint32 // reads since PutEnd, plus the eviction-history seed (see recallLocked)
	crc        uint32
	complete   bool
	flags      uint8
	offload    uint8  // offloadNone | offloadQueued | offloadDispatched
	memPos     uint32 // 1 + its position in its shard's DRAM index (0: not there); fits the padding
}

// The DRAM index position must not grow the object (see "Memory").
var _ [96 - unsafe.Sizeof(object{})]byte

const (
	flagHasCRC uint8 = 1 << iota
	flagSoftPin
	flagHardPin
	flagRead // read at least once since PutEnd (lastRead is valid)
	// flagOffloadFailed: an offload of this object failed (disk full, I/O
	// error, timeout). Eviction then frees its MEMORY without waiting for
	// a disk copy that may never come.
	flagOffloadFailed
	// flagRebuilt: re-created from an appliance's DRAM directory
	// (RegisterDramObjects). Its writer's PutEnd, if the old master died
	// between the write and it, answers success (see putEnd).
	flagRebuilt
	// flagLanding: a staged put (PutConfig.Stage), committed at its
	// PutStart, whose node has not yet been seen to acknowledge the
	// commit record that lands its bytes; lastRead holds that record's
	// seq (flagRead is clear). GetReplicaList waits for the
	// acknowledgement before it hands the replica out (landedLocked).
	flagLanding
)

const (
	offloadNone uint8 = iota
	offloadQueued
	offloadDispatched
)

// replica is one stored copy. MEMORY/NOF replicas point at their segment,
// LOCAL_DISK replicas at the owning client.
type replica struct {
	seg    *segment
	disk   *client
	offset uint64
	length uint64
	bucket uint64
	typ    ReplicaType
	state  ReplicaState
	// unconfirmed (LOCAL_DISK only): a copy the node's previous
	// incarnation held, or may hold (an offload it was writing), that its
	// new incarnation has not re-registered yet; kept so the object does
	// not vanish and a Remove reaches the node, never handed to readers
	// (diskindex.go, "Restarts").
	unconfirmed bool
}

// allocLen is the number of allocator bytes the replica holds.
func (r *replica) allocLen() uint64 {
	if r.seg == nil {
		return 0
	}
	return r.seg.roundUp(r.length)
}

type shard struct {
	mu       sync.Mutex
	objs     map[string]*object // composite key (see ck) → object; guarded by mu
	inflight map[string]*object // guarded by mu: the objects not yet COMPLETE
	// mem: the objects holding a MEMORY replica (any state), so that an
	// eviction pass visits DRAM's objects and not the SSD-only ones, which
	// a tiered store has many times more of. A slice (each object knows its
	// position, object.memPos) rather than a map: 24 bytes a DRAM object
	// instead of ~56. Guarded by mu; kept by noteMemLocked and
	// dropObjectLocked.
	mem  []memRef
	hist history // guarded by mu: eviction history of this shard's keys
	// disk: the keys of this shard holding a LOCAL_DISK replica, by node
	// and bucket (diskindex.go), so that dropping a bucket or a node's
	// copies visits only those objects. Guarded by mu.
	disk map[diskRef]map[string]struct{}
	// gone: per node gone (or back and re-registering), the keys whose
	// copy on it was dropped when it went; guarded by mu (diskindex.go).
	gone map[*client]map[string]struct{}
	_    [8]byte
}

// reservation is space of a taken-over put, freed at releaseAt.
type reservation struct {
	seg       *segment
	off, n    uint64 // n: allocator length
	releaseAt int64
}

// settings is the run-time changeable configuration, replaced as a whole.
type settings struct {
	dram   DramSettings
	ssd    TierSettings
	policy LeasePolicy
}

// Master is the kvtier control plane: object metadata, segments, allocation,
// leases, pins, quotas, eviction and offload coordination. All methods are
// safe for concurrent use.
type Master struct {
	cfg  Config
	sess sessions // client ID -> authenticated principal (sessions.go)
	seed maphash.Seed

	shards   [numShards]shard
	nObjects atomic.Int64
	// histLimit is the eviction history size in entries (0 = disabled):
	// Config.EvictionHistory, or the default grown by eviction passes.
	histLimit atomic.Int64
	// histSeq numbers the evictions remembered in the history (wrapping);
	// an entry is valid while fewer than histLimit came after it.
	histSeq atomic.Uint32

	segs    segTable
	clients clientTable
	offload offloadQueue
	rmq     removalOutbox // removals of LOCAL_DISK copies (removals.go)
	dram    dramOutbox    // appliances' DRAM directory records (dramdir.go)

	usage sync.Map // tenant → *atomic.Uint64 logical bytes held

	abandonedMu sync.Mutex
	abandoned   []reservation // guarded by abandonedMu

	settings atomic.Pointer[settings]

	evictMu    sync.Mutex     // serializes eviction passes
	lastReport EvictionReport // guarded by evictMu
	nextEvict  time.Time      // guarded by evictMu: back-off after short passes
	backoff    time.Duration  // guarded by evictMu
	// turnover (guarded by evictMu) measures the DRAM lifetime over the
	// passes; turnoverCap is the capacity in objects the last pass
	// estimated (capacityObjects).
	turnover    Turnover
	turnoverCap int
	passGen     atomic.Uint64 // completed eviction passes
	// Eviction scan buffers, reused across passes, and the candidates a
	// scan selected for later passes (evictor.go); guarded by evictMu.
	scanFirst, scanSoft []Candidate
	scanRefs            []candRef
	evc                 evictCache

	interned sync.Map // client ids, so objects share writer strings

	fenced atomic.Bool // leadership lost: mutations refused (Fence)
	// started (unix ns, set by New) and restarted (a node reported DRAM
	// objects this master never knew) time the rebuild window (dramdir.go).
	started   int64
	restarted atomic.Bool
	// holderSeen: a node that holds objects (segments, an SSD tier, a
	// DRAM directory) has heartbeated or mounted (settling).
	holderSeen atomic.Bool
	// stopped is closed when Run returns: long-lived streams
	// (TakeDramRecords) end, so a graceful stop does not wait for them.
	stopped  chan struct{}
	stopOnce sync.Once
	// evictWake wakes Run's evictor: an allocation took a MEMORY segment
	// past its share of the background trigger (segment.evictAt).
	evictWake chan struct{}
	grantKeys grantKeyTable // per-node data-plane grant secrets (grants.go)

	ctr    counterSet
	events eventBus
	putSeq atomic.Uint64
}

// New returns a Master for cfg (zero fields take defaults).
func New(cfg Config) (*Master, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	q := make(map[string]uint64, len(cfg.TenantQuota))
	for k, v := range cfg.TenantQuota {
		q[k] = v
	}
	cfg.TenantQuota = q
	m := &Master{cfg: cfg, seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].objs = make(map[string]*object)
		m.shards[i].inflight = make(map[string]*object)
		m.shards[i].disk = make(map[diskRef]map[string]struct{})
		m.shards[i].gone = make(map[*client]map[string]struct{})
	}
	switch {
	case cfg.EvictionHistory > 0:
		m.histLimit.Store(int64(cfg.EvictionHistory))
	case cfg.EvictionHistory == 0:
		m.histLimit.Store(evictionHistoryMin)
	}
	m.segs.init()
	m.clients.init()
	m.offload.init(cfg.OffloadQueueLimit)
	m.rmq.init()
	m.dram.init()
	m.started = m.now().UnixNano()
	m.stopped = make(chan struct{})
	m.evictWake = make(chan struct{}, 1)
	pol, err := NewLeasePolicy(cfg.LeasePolicy, cfg.FrequencyBonus, cfg.FrequencyMaxBonus)
	if err != nil {
		return nil, err
	}
	m.settings.Store(&settings{
		dram:   DramSettings{HighWatermark: cfg.HighWatermark, EvictionRatio: cfg.EvictionRatio, LeasePolicy: cfg.LeasePolicy},
		ssd:    TierSettings{OffloadMode: cfg.OffloadMode, SSDPolicy: cfg.SSDPolicy, SSDCapacity: cfg.SSDCapacity, SSDHighWatermark: cfg.SSDHighWatermark},
		policy: pol,
	})
	return m, nil
}

// Config returns the effective configuration (defaults applied).
func (m *Master) Config() Config { return m.cfg }

// Run owns the background work: the evictor (every EvictInterval), the
// timeout reaper and client liveness. It returns when ctx is done.
func (m *Master) Run(ctx context.Context) {
	defer m.stopOnce.Do(func() { close(m.stopped) })
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		t := time.NewTimer(m.cfg.EvictInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-m.evictWake:
			}
			t.Reset(m.evictorWait(m.maybeEvict(ctx)))
		}
	}()
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.Reap(ctx)
			}
		}
	}()
	wg.Wait()
}

// Reap runs one round of the time-driven rules: client liveness (GRACE,
// GONE), drained segments past their deadline, abandoned puts past the
// release timeout, and offload tasks past their timeout. Run calls it
// periodically; tests call it after advancing a fake clock.
func (m *Master) Reap(ctx context.Context) {
	now := m.now().UnixNano()
	m.checkClients(ctx, now)
	m.finishDrains(ctx, now)
	m.reapPuts(now)
	m.reapOffloads(now)
	m.reapReports(now)
}

// ck builds the composite map key: one length byte, the tenant, the key.
func ck(tenant, key string) string {
	var sb strings.Builder
	sb.Grow(1 + len(tenant) + len(key))
	sb.WriteByte(byte(len(tenant)))
	sb.WriteString(tenant)
	sb.WriteString(key)
	return sb.String()
}

// appendCK appends the composite key to buf: read paths build it on the
// stack and look it up without allocating.
func appendCK(buf []byte, tenant, key string) []byte {
	buf = append(buf, byte(len(tenant)))
	buf = append(buf, tenant...)
	return append(buf, key...)
}

func (m *Master) shardOfBytes(c []byte) *shard {
	return &m.shards[maphash.Bytes(m.seed, c)&(numShards-1)]
}

// splitCK is the inverse of ck.
func splitCK(c string) (tenant, key string) {
	n := int(c[0])
	return c[1 : 1+n], c[1+n:]
}

func (m *Master) shardOf(c string) *shard {
	return &m.shards[m.shardIndex(c)]
}

// shardIndex is the index in m.shards of c's shard.
func (m *Master) shardIndex(c string) uint32 {
	return uint32(maphash.String(m.seed, c) & (numShards - 1))
}

func (m *Master) intern(s string) string {
	if v, ok := m.interned.Load(s); ok {
		return v.(string)
	}
	v, _ := m.interned.LoadOrStore(s, s)
	return v.(string)
}

// normTenant applies the default tenant and checks the name.
func normTenant(t string) (string, error) {
	if t == "" {
		return DefaultTenant, nil
	}
	if len(t) > MaxTenantLen {
		return "", kverr.New(kverr.InvalidParams, "", "tenant name longer than %d bytes", MaxTenantLen)
	}
	return t, nil
}

// checkKey validates tenant and key and returns the composite key.
func (m *Master) checkKey(tenant, key string) (string, string, error) {
	t, err := m.validKey(tenant, key)
	if err != nil {
		return "", "", err
	}
	return t, ck(t, key), nil
}

// validKey validates tenant and key and returns the tenant name.
func (m *Master) validKey(tenant, key string) (string, error) {
	t, err := normTenant(tenant)
	if err != nil {
		return "", err
	}
	if key == "" {
		return "", kverr.New(kverr.InvalidKey, "", "empty key")
	}
	if len(key) > m.cfg.MaxKeyLen {
		return "", kverr.New(kverr.InvalidKey, key, "key is %d bytes, the maximum is %d", len(key), m.cfg.MaxKeyLen)
	}
	return t, nil
}

func (m *Master) tenantUsage(t string) *atomic.Uint64 {
	if v, ok := m.usage.Load(t); ok {
		return v.(*atomic.Uint64)
	}
	v, _ := m.usage.LoadOrStore(t, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// memRef is one entry of a shard's DRAM index.
type memRef struct {
	ck string
	o  *object
}

// noteMemLocked keeps sh.mem in step with o's replicas after they changed.
// sh.mu must be held.
func noteMemLocked(sh *shard, c string, o *object) {
	for i := range o.replicas {
		if o.replicas[i].typ == Memory {
			if o.memPos == 0 {
				sh.mem = append(sh.mem, memRef{c, o})
				o.memPos = uint32(len(sh.mem))
			}
			return
		}
	}
	unindexMemLocked(sh, o)
}

// unindexMemLocked takes o out of sh.mem (swapping the last entry into its
// place). sh.mu must be held.
func unindexMemLocked(sh *shard, o *object) {
	if o.memPos == 0 {
		return
	}
	i, last := int(o.memPos-1), len(sh.mem)-1
	if i != last {
		sh.mem[i] = sh.mem[last]
		sh.mem[i].o.memPos = uint32(i + 1)
	}
	sh.mem[last] = memRef{}
	sh.mem = sh.mem[:last]
	o.memPos = 0
}

// dropObjectLocked forgets o (whose replicas have already been released or
// dropped): object count and tenant usage. sh.mu must be held.
func (m *Master) dropObjectLocked(sh *shard, c string, o *object) {
	delete(sh.objs, c)
	unindexMemLocked(sh, o)
	m.nObjects.Add(-1)
	t, _ := splitCK(c)
	m.tenantUsage(t).Add(^(o.size - 1))
	if o.offload != offloadNone {
		m.offload.forget(c)
	}
	o.offload = offloadNone
	if !o.complete {
		delete(sh.inflight, c)
	}
}

// freeReplicaLocked returns a MEMORY/NOF replica's space to its segment.
// It returns the seq of the DRAM-directory free record queued (0: none).
func (m *Master) freeReplicaLocked(r *replica) uint64 {
	if r.seg == nil {
		return 0
	}
	seq := m.queueFreeLocked(r)
	r.seg.release(r.offset, r.allocLen())
	return seq
}

// leased reports whether o is under a read lease at now.
func (m *Master) leased(o *object, now int64) bool {
	return o.flags&flagRead != 0 && o.lastRead+int64(m.cfg.LeaseTTL) > now
}

func (m *Master) leaseDeadline(o *object) time.Time {
	if o.flags&flagRead == 0 {
		return time.Time{}
	}
	return time.Unix(0, o.lastRead+int64(m.cfg.LeaseTTL))
}

func unixOrZero(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// forEachShard calls fn with every shard locked in turn.
func (m *Master) forEachShard(fn func(sh *shard)) {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		fn(sh)
		sh.mu.Unlock()
	}
}
