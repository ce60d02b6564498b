package ssd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
)

// objKey identifies an object: keys are unique per tenant.
type objKey struct{ tenant, key string }

// bucket is one data file plus one metadata file.
type bucket struct {
	id      uint64
	created time.Time
	// data is the O_DIRECT data file, shared by writers and readers. It is
	// closed once the bucket is retired and its last reader has finished, so
	// a read that started before deletion still reads the unlinked file.
	data File

	// Fields below are guarded by Tier.mu.
	meta       File   // append handle; nil once sealed with no writer left, and for recovered buckets
	reserved   uint64 // next data offset: sum of padded reservations
	nobj       int    // reservations, committed or not
	used       uint64 // bytes this bucket adds to Tier.used
	sealed     bool   // takes no more reservations
	writers    int    // Puts between reservation and commit/abort
	readers    int    // ReadExtent calls in flight
	evicting   bool   // an eviction pass is asking the master to drop it
	removed    bool   // out of Tier.buckets: no new reads
	retired    bool   // eviction finished with its files
	dataClosed bool
	lastUse    time.Time         // creation, then last read (LRU)
	extents    map[uint64]*Entry // data offset -> committed object
	drained    chan struct{}     // closed when readers reaches 0 (set by eviction)
	metaPath   string            // full paths, immutable
	dataPath   string

	allocMu sync.Mutex
	// allocated and noAlloc are guarded by allocMu, which is held across
	// one Allocate (fallocate) of the data file, only against writers of
	// this bucket that need blocks past allocated.
	allocated uint64 // data file size with allocated blocks
	noAlloc   bool   // the file system cannot preallocate: writes extend the file
	// allocSeen mirrors allocated for readers that must not wait on a
	// fallocate (the free-space check, space.go).
	allocSeen atomic.Uint64

	metaMu sync.Mutex
	// metaLen, metaAlloc and metaBad are guarded by metaMu, which is held
	// across one frame append (WriteAt + fdatasync of the metadata file).
	// Only the commit goroutine appends, one frame at a time, so a frame is
	// written only once the one before it is durable and a crash can tear
	// only the last frame (what lets recovery tell a torn tail from
	// corruption).
	metaLen   int64 // end of the frames
	metaAlloc int64 // file size: frames plus the zero-filled reserve
	metaBad   bool  // a commit failed: the on-disk tail may be torn, commit no more

	// queue holds the Puts whose data is written and whose records await
	// the next commit, in completion order. Guarded by Tier.cm.mu.
	queue []*Pending
}

// counters are the monotonically increasing figures of Stats.
type counters struct {
	puts, reads, bytesWritten, bytesRead      atomic.Uint64
	evictedBuckets, evictedBytes, evictRefuse atomic.Uint64
	noSpace, orphans, torn, commits           atomic.Uint64
	readErrors, writeErrors, checksumFailures atomic.Uint64
}

// Tier is the SSD tier of one appliance: buckets of objects in Dir, an
// in-memory index, and bucket eviction. Safe for concurrent use.
type Tier struct {
	cfg      Config // defaults applied; immutable after Open
	fs       FS
	dir      string
	clock    clock.Clock
	log      *slog.Logger
	notifier Notifier
	bufs     alignedPool
	st       counters
	// metaReserve is the zero-filled reserve of metadata files (see
	// maxMetaReserve).
	metaReserve int64
	// prealloc is how far ahead of its objects a data file is allocated.
	prealloc uint64

	// readPieces is Config.ReadPieces; the benchmarks change it between
	// reads (never during one) for their same-run comparison.
	readPieces int

	// onDrainWait, when set (by tests, before use), is called when an
	// eviction starts waiting for the readers of a bucket.
	onDrainWait func(bucket uint64)

	lock      io.Closer     // flock on Dir/LOCK, released by Close
	createSem chan struct{} // one bucket creation at a time
	evictSem  chan struct{} // one eviction pass at a time
	kick      chan struct{} // wakes Run
	// ops counts Puts (from claiming their key to commit or failure), reads
	// and eviction passes, for Close.
	ops sync.WaitGroup
	cm  committer // group commit (commit.go); has its own lock
	rm  removals  // removals log and active removals (remove.go)
	// space is the file system's free space (space.go): its own lock for
	// the statfs clock, Tier.mu for the limit.
	space spaceWatch

	mu sync.Mutex
	// Fields below are guarded by mu. Add to ops only with mu held and
	// closed false, so Close's Wait never races an Add.
	closed      bool
	capacity    uint64
	high, low   float64
	policy      Policy
	used        uint64
	nextID      uint64
	open        *bucket
	buckets     map[uint64]*bucket
	index       map[objKey]*Entry
	inflight    map[objKey]chan struct{} // one Put per key at a time
	quarantined []error
}

// Open opens the tier in cfg.Dir, creating the directory if needed, or
// recovering the buckets already there.
func Open(ctx context.Context, cfg Config) (*Tier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, kverr.New(kverr.InvalidParams, "", "%v", err)
	}
	cfg = cfg.withDefaults()
	t := &Tier{
		cfg:         cfg,
		fs:          cfg.FS,
		dir:         filepath.Clean(cfg.Dir),
		clock:       cfg.Clock,
		log:         cfg.Logger,
		notifier:    cfg.Notifier,
		createSem:   make(chan struct{}, 1),
		evictSem:    make(chan struct{}, 1),
		kick:        make(chan struct{}, 1),
		capacity:    cfg.Capacity,
		metaReserve: int64(min(maxMetaReserve, max(Block, cfg.Capacity/64/Block*Block))),
		prealloc:    min(maxPrealloc, cfg.BucketSize),
		readPieces:  cfg.ReadPieces,
		high:        cfg.HighWatermark,
		low:         cfg.LowWatermark,
		policy:      cfg.Policy,
		nextID:      1,
		buckets:     make(map[uint64]*bucket),
		index:       make(map[objKey]*Entry),
		inflight:    make(map[objKey]chan struct{}),
	}
	if err := t.fs.MkdirAll(t.dir, 0o755); err != nil {
		// A read-only file system may still hold a readable tier.
		if _, serr := t.fs.ReadDir(t.dir); serr != nil {
			return nil, kverr.New(kverr.FileWriteFail, "", "ssd: cannot create %s: %v", t.dir, err)
		}
	}
	lock, err := t.fs.Lock(filepath.Join(t.dir, lockFile))
	if err != nil {
		return nil, kverr.New(kverr.UnavailableInCurrentStatus, "", "ssd: cannot lock %s (one tier per directory): %v", t.dir, err)
	}
	t.lock = lock
	if err := t.recover(ctx); err != nil {
		lock.Close()
		return nil, err
	}
	t.cm.init(cfg.CommitInterval, cfg.CommitBytes)
	go t.commitLoop()
	return t, nil
}

func checkKey(tenant, key string) error {
	if key == "" {
		return kverr.New(kverr.InvalidKey, key, "ssd: empty key")
	}
	if len(key) > maxName || len(tenant) > maxName {
		return kverr.New(kverr.InvalidKey, key, "ssd: tenant (%d bytes) and key (%d bytes) must each be at most %d bytes", len(tenant), len(key), maxName)
	}
	return nil
}

// Put stores value under (tenant, key) and returns where it lives, once
// the object is durable: it is PutAsync followed by an immediate commit that
// Puts running at the same time share (group commit). crc must be the
// CRC32C of value (see Checksum), or 0 when the object has no checksum (the
// master's convention): the tier then computes and keeps one. A mismatch
// stores nothing. A key already stored with the same size and checksum
// returns its location (first writer wins); with a different size or
// checksum it is OBJECT_ALREADY_EXISTS. When the tier is full and eviction
// cannot make room, Put returns NO_AVAILABLE_HANDLE (the appliance's "not
// offloaded"); a full or read-only disk is NO_AVAILABLE_HANDLE or
// FILE_WRITE_FAIL. A value larger than BucketSize gets a bucket of its own;
// one larger than Capacity is PAYLOAD_TOO_LARGE. If ctx ends while Put waits
// for the commit, Put returns ctx's error and the object may still become
// durable and stored.
func (t *Tier) Put(ctx context.Context, tenant, key string, value []byte, crc uint32) (Location, error) {
	p, err := t.PutAsync(ctx, tenant, key, value, crc)
	if err != nil {
		return Location{}, err
	}
	select {
	case <-p.done:
	default:
		t.cm.signal(t.cm.now)
	}
	return p.Wait(ctx)
}

// claimKey returns the location of an already stored (tenant, key), or
// claims the key for this Put; done reports that Put is finished.
func (t *Tier) claimKey(ctx context.Context, k objKey, size uint64, crc uint32) (Location, bool, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return Location{}, true, errClosed(k.key)
		}
		if e, ok := t.index[k]; ok && !t.buckets[e.Loc.Bucket].evicting {
			t.mu.Unlock()
			if e.Size == size && e.CRC32C == crc {
				return e.Loc, true, nil
			}
			return Location{}, true, kverr.New(kverr.ObjectAlreadyExists, k.key,
				"ssd: stored with %d bytes crc %08x, not %d bytes crc %08x", e.Size, e.CRC32C, size, crc)
		}
		ch, busy := t.inflight[k]
		if !busy {
			t.inflight[k] = make(chan struct{})
			t.ops.Add(1)
			t.mu.Unlock()
			return Location{}, false, nil
		}
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Location{}, true, ctx.Err()
		}
	}
}

func (t *Tier) releaseKey(k objKey) {
	t.mu.Lock()
	close(t.inflight[k])
	delete(t.inflight, k)
	t.mu.Unlock()
	t.ops.Done()
}

func errClosed(key string) error {
	return kverr.New(kverr.UnavailableInCurrentStatus, key, "ssd: tier is closed")
}

// writeErr maps a write failure to a kverr: a full disk is
// NO_AVAILABLE_HANDLE (the caller backs off), anything else FILE_WRITE_FAIL.
func writeErr(key, what string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return kverr.New(kverr.NoAvailableHandle, key, "ssd: disk full writing %s: %v", what, err)
	}
	if errors.Is(err, syscall.EROFS) {
		return kverr.New(kverr.FileWriteFail, key, "ssd: file system is read-only writing %s: %v", what, err)
	}
	return kverr.New(kverr.FileWriteFail, key, "ssd: writing %s: %v", what, err)
}

func (t *Tier) fitsLocked(b *bucket, need uint64) bool {
	return !b.sealed && b.nobj < t.cfg.BucketMaxObjects &&
		(b.reserved == 0 || b.reserved+need <= t.bucketSizeLocked())
}

// sealLocked stops appends to b and closes its metadata handle when no
// writer needs it (close(2) of a file with nothing to flush: no disk I/O).
func (t *Tier) sealLocked(b *bucket) {
	b.sealed = true
	if t.open == b {
		t.open = nil
	}
	if b.writers == 0 && b.meta != nil {
		_ = b.meta.Close()
		b.meta = nil
	}
}

// reserve finds room for an object of need padded bytes plus its record of
// rlen bytes: in the open bucket, or in a new one, evicting first when the
// tier would pass its capacity.
func (t *Tier) reserve(ctx context.Context, key string, need, rlen uint64) (*bucket, File, uint64, error) {
	for tries := 0; ; {
		t.refreshSpace(false) // the file system may hold less than Capacity (space.go)
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, nil, 0, errClosed(key)
		}
		b := t.open
		if b != nil && !t.fitsLocked(b, need) {
			t.sealLocked(b)
			b = nil
		}
		extra := need + rlen
		if b == nil {
			extra += uint64(t.metaReserve)
		}
		if whole := need + rlen + uint64(t.metaReserve); whole > t.capacity {
			capacity := t.capacity
			t.mu.Unlock() // evicting everything would not help
			return nil, nil, 0, kverr.New(kverr.PayloadTooLarge, key, "ssd: %d bytes cannot fit a tier of %d bytes", whole, capacity)
		}
		if eff := t.effectiveCapacityLocked(); t.used+extra > eff {
			used, capacity := t.used, eff
			t.mu.Unlock()
			tries++
			res, err := t.evict(ctx, extra)
			if err != nil && ctx.Err() != nil {
				return nil, nil, 0, err
			}
			if (res.FreedBytes == 0 && !res.roomFree) || tries > 8 {
				t.st.noSpace.Add(1)
				return nil, nil, 0, kverr.New(kverr.NoAvailableHandle, key,
					"ssd: tier full (%d of %d bytes used%s, %d needed) and eviction freed nothing: %s", used, capacity, t.fsNote(capacity), extra, res.Reason)
			}
			continue
		}
		if b == nil {
			t.mu.Unlock()
			if err := t.openNewBucket(ctx, key); err != nil {
				if tries++; tries > 8 || !t.evictForRoom(ctx, err, extra) {
					return nil, nil, 0, err
				}
			}
			continue
		}
		off := b.reserved
		b.reserved += need
		b.nobj++
		b.writers++
		b.used += need
		t.used += need
		if b.reserved >= t.bucketSizeLocked() || b.nobj >= t.cfg.BucketMaxObjects {
			t.sealLocked(b)
		}
		meta := b.meta
		over := float64(t.used) > t.high*float64(t.capacity)
		t.mu.Unlock()
		if over {
			t.wake()
		}
		return b, meta, off, nil
	}
}

func (t *Tier) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// openNewBucket creates the next bucket and makes it the open one.
func (t *Tier) openNewBucket(ctx context.Context, key string) error {
	select {
	case t.createSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-t.createSem }()
	t.mu.Lock()
	if t.open != nil {
		t.mu.Unlock()
		return nil // another Put created one meanwhile
	}
	id := t.nextID
	t.nextID++
	t.mu.Unlock()

	b, err := t.createBucket(id)
	if err != nil {
		t.st.writeErrors.Add(1)
		t.log.Warn("ssd: cannot create bucket", "bucket", id, "err", err)
		return writeErr(key, fmt.Sprintf("new bucket %d", id), err)
	}
	t.mu.Lock()
	t.buckets[id] = b
	t.used += b.used
	if id < t.rm.floor {
		// A removal recorded while this bucket was being created has its
		// point past it: objects written here would count as removed.
		// Leave it empty (recovery deletes it) and take the next one.
		t.sealLocked(b)
	} else {
		t.open = b
	}
	t.mu.Unlock()
	return nil
}

// createBucket persists the id high-water mark, then creates the data file
// and the metadata file with its header, both durable with their directory
// entries before the bucket takes its first object.
func (t *Tier) createBucket(id uint64) (*bucket, error) {
	if err := t.writeIDs(id + 1); err != nil {
		return nil, err
	}
	b := &bucket{
		id:        id,
		created:   t.clock.Now(),
		extents:   make(map[uint64]*Entry),
		dataPath:  filepath.Join(t.dir, dataName(id)),
		metaPath:  filepath.Join(t.dir, metaName(id)),
		used:      uint64(t.metaReserve),
		metaLen:   metaHeaderSize,
		metaAlloc: t.metaReserve,
	}
	b.lastUse = b.created
	var err error
	cleanup := func() {
		if b.data != nil {
			_ = b.data.Close()
			_ = t.fs.Remove(b.dataPath)
		}
		if b.meta != nil {
			_ = b.meta.Close()
			_ = t.fs.Remove(b.metaPath)
		}
	}
	if b.data, err = t.fs.OpenFile(b.dataPath, osCreateRW, 0o644, true); err != nil {
		cleanup()
		return nil, err
	}
	if b.meta, err = t.fs.OpenFile(b.metaPath, osCreateRW, 0o644, false); err != nil {
		cleanup()
		return nil, err
	}
	// The header and the zero-filled reserve in one write (see maxMetaReserve).
	hdr := make([]byte, t.metaReserve)
	copy(hdr, encodeHeader(metaHeader{Bucket: id, Created: b.created.UnixNano()}))
	if _, err = b.meta.WriteAt(hdr, 0); err == nil {
		if err = b.meta.Sync(); err == nil {
			err = t.fs.SyncDir(t.dir)
		}
	}
	if err != nil {
		cleanup()
		return nil, err
	}
	return b, nil
}

// appendMeta appends one commit frame and makes it durable (see metaMu).
// When the reserve runs out it is extended in the same write; grown is the
// number of bytes the file grew by.
func (b *bucket) appendMeta(meta File, frame []byte, reserve int64) (grown int64, err error) {
	b.metaMu.Lock()
	defer b.metaMu.Unlock()
	if b.metaBad || meta == nil {
		return 0, errors.New("an earlier commit of this bucket failed; bucket sealed")
	}
	buf := frame
	end := b.metaLen + int64(len(frame))
	if end > b.metaAlloc {
		grown = end + reserve - b.metaAlloc
		buf = make([]byte, int64(len(frame))+reserve) // the frame, then a fresh reserve
		copy(buf, frame)
	}
	_, err = meta.WriteAt(buf, b.metaLen)
	if err == nil {
		err = meta.Sync()
	}
	if err != nil {
		b.metaBad = true
		return 0, err
	}
	b.metaLen = end
	b.metaAlloc += grown
	return grown, nil
}

// abortWrite ends a failed Put: the bucket is sealed so nothing is appended
// after a possibly torn write, its committed objects keep serving, and the
// reserved space stays counted until the bucket is evicted.
func (t *Tier) abortWrite(b *bucket, err error) {
	t.st.writeErrors.Add(1)
	t.log.Warn("ssd: write failed; bucket sealed", "bucket", b.id, "err", err)
	t.mu.Lock()
	b.writers--
	t.sealLocked(b)
	t.mu.Unlock()
	if errors.Is(err, syscall.ENOSPC) {
		t.refreshSpace(true) // another writer filled the disk: work to what is left
		t.wake()
	}
}

// ReadExtent reads the object stored at (bucket, offset) into dst, whose
// length must be the object's length, and verifies its CRC32C before
// returning. A Block-aligned range inside one object is read too, without
// a checksum (see readRange). On any error dst holds no object bytes (it is zeroed).
// Unknown bucket or offset: OBJECT_NOT_FOUND; checksum mismatch:
// CHECKSUM_MISMATCH; I/O error: FILE_READ_FAIL.
func (t *Tier) ReadExtent(ctx context.Context, bucketID, offset uint64, dst []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return errClosed("")
	}
	b := t.buckets[bucketID]
	if b == nil {
		t.mu.Unlock()
		return kverr.New(kverr.ObjectNotFound, "", "ssd: no bucket %d on this tier", bucketID)
	}
	e := b.extents[offset]
	if e == nil || uint64(len(dst)) < e.Size {
		// Part of an object: a ranged read (ranged.go), checked by the
		// caller's checksum over the whole object.
		if r := containingLocked(b, offset, uint64(len(dst))); r != nil {
			return t.readRange(ctx, b, r, offset, dst)
		}
	}
	if e == nil {
		t.mu.Unlock()
		return kverr.New(kverr.ObjectNotFound, "", "ssd: no object at bucket %d offset %d", bucketID, offset)
	}
	if uint64(len(dst)) != e.Size {
		t.mu.Unlock()
		return kverr.New(kverr.InvalidParams, e.Key, "ssd: object has %d bytes, buffer %d", e.Size, len(dst))
	}
	b.readers++
	b.lastUse = t.clock.Now()
	t.ops.Add(1)
	key, crc := e.Key, e.CRC32C
	t.mu.Unlock()
	defer t.endRead(b)

	// An extent of 2 MiB or more is read in pieces, each checksummed as
	// it lands (readVerify); nothing reaches the caller before the whole
	// checksum matched.
	sum, err := t.readVerify(b.data, offset, dst)
	if err != nil {
		clear(dst)
		t.st.readErrors.Add(1)
		return kverr.New(kverr.FileReadFail, key, "ssd: bucket %d offset %d: %v", bucketID, offset, err)
	}
	if sum != crc {
		clear(dst)
		t.st.checksumFailures.Add(1)
		t.log.Warn("ssd: checksum mismatch", "bucket", bucketID, "offset", offset, "stored", crc, "read", sum)
		return kverr.New(kverr.ChecksumMismatch, key, "ssd: bucket %d offset %d: stored CRC32C %08x, read %08x", bucketID, offset, crc, sum)
	}
	t.st.reads.Add(1)
	t.st.bytesRead.Add(uint64(len(dst)))
	return nil
}

func (t *Tier) endRead(b *bucket) {
	var closeData bool
	t.mu.Lock()
	b.readers--
	if b.readers == 0 {
		if b.drained != nil {
			close(b.drained)
			b.drained = nil
		}
		if b.retired && !b.dataClosed {
			b.dataClosed, closeData = true, true
		}
	}
	t.mu.Unlock()
	if closeData {
		_ = b.data.Close()
	}
	t.ops.Done()
}

// Lookup returns the stored object (tenant, key).
func (t *Tier) Lookup(tenant, key string) (Entry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.index[objKey{tenant, key}]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Objects returns every COMPLETE object, ordered by bucket and offset, for
// re-registration with the master after a restart.
func (t *Tier) Objects() []Entry {
	t.mu.Lock()
	out := make([]Entry, 0, len(t.index))
	for _, e := range t.index {
		out = append(out, *e)
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Loc.Bucket != out[j].Loc.Bucket {
			return out[i].Loc.Bucket < out[j].Loc.Bucket
		}
		return out[i].Loc.Offset < out[j].Loc.Offset
	})
	return out
}

// SetPolicy switches the eviction policy; the next pass uses it.
func (t *Tier) SetPolicy(p Policy) {
	t.mu.Lock()
	t.policy = p
	t.mu.Unlock()
}

// SetCapacity changes the byte limit; Run evicts if the tier is now over its
// high watermark.
func (t *Tier) SetCapacity(c uint64) {
	t.mu.Lock()
	t.capacity = c
	t.mu.Unlock()
	t.wake()
}

// SetHighWatermark changes the high watermark; it must stay above the low one.
func (t *Tier) SetHighWatermark(h float64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := checkWatermarks(h, t.low); err != nil {
		return kverr.New(kverr.InvalidParams, "", "%v", err)
	}
	t.high = h
	t.wake()
	return nil
}

// Quarantined lists the buckets set aside at recovery, each a
// *QuarantineError saying why.
func (t *Tier) Quarantined() []error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]error(nil), t.quarantined...)
}

// Stats returns a snapshot of the tier's figures.
func (t *Tier) Stats() Stats {
	t.mu.Lock()
	s := Stats{
		Capacity:           t.capacity,
		Used:               t.used,
		HighWatermark:      t.high,
		LowWatermark:       t.low,
		Policy:             t.policy,
		Buckets:            len(t.buckets),
		Objects:            len(t.index),
		QuarantinedBuckets: len(t.quarantined),
	}
	if t.open != nil {
		s.OpenBucket = t.open.id
	}
	t.mu.Unlock()
	s.Puts = t.st.puts.Load()
	s.Commits = t.st.commits.Load()
	s.Reads = t.st.reads.Load()
	s.BytesWritten = t.st.bytesWritten.Load()
	s.BytesRead = t.st.bytesRead.Load()
	s.EvictedBuckets = t.st.evictedBuckets.Load()
	s.EvictedBytes = t.st.evictedBytes.Load()
	s.EvictRefused = t.st.evictRefuse.Load()
	s.NoSpace = t.st.noSpace.Load()
	s.OrphansRemoved = t.st.orphans.Load()
	s.TornRecords = t.st.torn.Load()
	s.ReadErrors = t.st.readErrors.Load()
	s.WriteErrors = t.st.writeErrors.Load()
	s.ChecksumFailures = t.st.checksumFailures.Load()
	return s
}

// Close seals the open bucket, commits every object PutAsync has written,
// waits for in-flight Puts, reads and eviction passes, stops the commit
// goroutine and closes every file. Everything stored stays on disk for the
// next Open. Run must be stopped through its context.
func (t *Tier) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	if t.open != nil {
		t.sealLocked(t.open)
	}
	t.mu.Unlock()
	t.cm.mu.Lock()
	t.cm.closing = true // records queued from now on commit at once
	t.cm.mu.Unlock()
	t.cm.signal(t.cm.now)
	t.ops.Wait()
	close(t.cm.stop)
	<-t.cm.exited

	t.trimAll()
	t.mu.Lock()
	var files []File
	for _, b := range t.buckets {
		if b.meta != nil {
			files = append(files, b.meta)
			b.meta = nil
		}
		if !b.dataClosed {
			b.dataClosed = true
			files = append(files, b.data)
		}
	}
	t.mu.Unlock()
	var first error
	for _, f := range files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	t.rm.logMu.Lock()
	if t.rm.file != nil {
		if err := t.rm.file.Close(); err != nil && first == nil {
			first = err
		}
		t.rm.file = nil
	}
	t.rm.logMu.Unlock()
	if err := t.lock.Close(); err != nil && first == nil {
		first = err
	}
	return first
}
