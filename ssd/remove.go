package ssd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"

	"github.com/kvtier/kvtier/kverr"
)

// Removal is one removal the master ordered (see doc.go, "Removals").
type Removal struct {
	Tenant string
	// Key names one object to remove: every copy of (Tenant, Key) stored
	// before the removal is dead. Empty when Cutoff is set.
	Key string
	// Cutoff removes every object of Tenant stored before the removal
	// whose key matches Pattern (Go RE2, unanchored: "" matches every key),
	// except the objects at Keep (the master still holds them: leased or
	// in flight when it removed the rest). One record, whatever the count.
	Cutoff  bool
	Pattern string
	Keep    []Location
}

// point is a position in the tier's write order: bucket ids only increase
// and offsets in a bucket are handed out in increasing order, so a location
// (b, o) was reserved before point p when b < p.bucket, or b == p.bucket
// and o < p.offset.
type point struct{ bucket, offset uint64 }

func (l Location) before(p point) bool {
	return l.Bucket < p.bucket || l.Bucket == p.bucket && l.Offset < p.offset
}

// kills reports whether record r removes the object e.
func (r *remRecord) kills(e *Entry) bool {
	if e.Tenant != r.Tenant || !e.Loc.before(point{r.Before, r.Off}) {
		return false
	}
	if r.Kind == remDelete {
		return e.Key == r.Key
	}
	for _, k := range r.Keep {
		if k.Bucket == e.Loc.Bucket && k.Offset == e.Loc.Offset {
			return false
		}
	}
	return r.compiledMatch(e.Key)
}

func (r *remRecord) compile() error {
	if r.Kind != remCutoff {
		return nil
	}
	if r.Pattern == "" {
		r.compiledMatch = func(string) bool { return true }
		return nil
	}
	re, err := regexp.Compile(r.Pattern)
	if err != nil {
		return err
	}
	r.compiledMatch = re.MatchString
	return nil
}

// removals is the tier's removal state (fields guarded by Tier.mu unless
// noted).
type removals struct {
	// activeDel and activeCut are removals recorded while objects reserved
	// before their point were still uncommitted: finishBatch drops such
	// objects instead of indexing them. activeDel holds, per key, the
	// delete with the latest point (it removes a superset). Pruned once no
	// bucket at or below their point has a writer left.
	activeDel map[objKey]*remRecord
	activeCut []*remRecord
	// floor: a bucket whose id was handed out below floor is sealed as
	// soon as it is created (a removal's point may lie past it).
	floor uint64

	// logMu serializes appends to the log (held across one write and
	// fdatasync, never with Tier.mu); file and size are guarded by it.
	logMu sync.Mutex
	file  File  // nil: the log could not be opened (read-only file system)
	size  int64 // end of the intact records
}

// Remove records rs durably in the removals log (one write, one
// fdatasync), then drops every object they remove from the index, so
// neither a read nor a restart ever serves it again. It returns how many
// indexed objects it dropped. A key stored again after Remove returned is a
// new object and is not affected. Invalid input (an empty key, a name too
// long, a pattern that does not compile or is longer than
// MaxRemovalPattern) is INVALID_PARAMS and records nothing; a failed write
// is FILE_WRITE_FAIL and removes nothing.
func (t *Tier) Remove(ctx context.Context, rs []Removal) (int, error) {
	if len(rs) == 0 {
		return 0, nil
	}
	recs := make([]*remRecord, len(rs))
	for i, r := range rs {
		rec := &remRecord{Tenant: r.Tenant, Key: r.Key, Pattern: r.Pattern, Keep: r.Keep, Kind: remDelete}
		if r.Cutoff {
			rec.Kind = remCutoff
			if r.Key != "" {
				return 0, kverr.New(kverr.InvalidParams, r.Key, "ssd: a cutoff names no key")
			}
			if len(r.Tenant) > maxName || len(r.Pattern) > MaxRemovalPattern || len(r.Keep) > maxRemovalKeep {
				return 0, kverr.New(kverr.InvalidParams, "", "ssd: cutoff tenant %d bytes (max %d), pattern %d bytes (max %d), keep %d (max %d)",
					len(r.Tenant), maxName, len(r.Pattern), MaxRemovalPattern, len(r.Keep), maxRemovalKeep)
			}
			if err := rec.compile(); err != nil {
				return 0, kverr.New(kverr.InvalidParams, "", "ssd: cutoff pattern: %v", err)
			}
		} else if err := checkKey(r.Tenant, r.Key); err != nil {
			return 0, kverr.New(kverr.InvalidParams, r.Key, "ssd: removal: %v", err)
		}
		recs[i] = rec
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}

	// The point: everything reserved so far lies before it. Objects
	// reserved before it and committed later are caught by finishBatch.
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return 0, errClosed("")
	}
	p := point{t.nextID, 0}
	if t.open != nil {
		p = point{t.open.id, t.open.reserved}
	}
	t.rm.floor = max(t.rm.floor, p.bucket)
	for _, r := range recs {
		r.Before, r.Off = p.bucket, p.offset
		if r.Kind == remCutoff {
			t.rm.activeCut = append(t.rm.activeCut, r)
			continue
		}
		if t.rm.activeDel == nil {
			t.rm.activeDel = make(map[objKey]*remRecord)
		}
		t.rm.activeDel[objKey{r.Tenant, r.Key}] = r
	}
	t.ops.Add(1)
	t.mu.Unlock()
	defer t.ops.Done()

	var buf []byte
	for _, r := range recs {
		buf = appendRemoval(buf, *r)
	}
	if err := t.appendRemovals(buf); err != nil {
		t.mu.Lock()
		t.rm.activeCut = slicesDeleteAll(t.rm.activeCut, recs)
		for _, r := range recs {
			if k := (objKey{r.Tenant, r.Key}); t.rm.activeDel[k] == r {
				delete(t.rm.activeDel, k)
			}
		}
		t.mu.Unlock()
		t.st.writeErrors.Add(1)
		return 0, writeErr("", "removals log", err)
	}

	// Apply, one bucket at a time for cutoffs so reads wait at most one
	// bucket's scan.
	n := 0
	var cutoffs []*remRecord
	t.mu.Lock()
	for _, r := range recs {
		if r.Kind == remCutoff {
			cutoffs = append(cutoffs, r)
			continue
		}
		if e := t.index[objKey{r.Tenant, r.Key}]; e != nil && r.kills(e) {
			t.dropEntryLocked(e)
			n++
		}
	}
	ids := make([]uint64, 0, len(t.buckets))
	if len(cutoffs) > 0 {
		for id := range t.buckets {
			if id <= p.bucket {
				ids = append(ids, id)
			}
		}
	}
	t.mu.Unlock()
	for _, id := range ids {
		t.mu.Lock()
		if b := t.buckets[id]; b != nil {
			for _, e := range b.extents {
				for _, r := range cutoffs {
					if r.kills(e) {
						if t.index[objKey{e.Tenant, e.Key}] == e {
							n++
						}
						t.dropEntryLocked(e)
						break
					}
				}
			}
		}
		t.mu.Unlock()
	}
	t.mu.Lock()
	t.pruneRemovalsLocked()
	t.mu.Unlock()
	return n, nil
}

func slicesDeleteAll(s, del []*remRecord) []*remRecord {
	out := s[:0]
	for _, r := range s {
		keep := true
		for _, d := range del {
			keep = keep && r != d
		}
		if keep {
			out = append(out, r)
		}
	}
	clear(s[len(out):])
	return out
}

// dropEntryLocked takes e out of its bucket and the index: reads of it get
// OBJECT_NOT_FOUND (a read already running finishes), and its space stays
// counted until the bucket is evicted.
func (t *Tier) dropEntryLocked(e *Entry) {
	if b := t.buckets[e.Loc.Bucket]; b != nil && b.extents[e.Loc.Offset] == e {
		delete(b.extents, e.Loc.Offset)
	}
	k := objKey{e.Tenant, e.Key}
	if t.index[k] == e {
		delete(t.index, k)
	}
}

// killedLocked reports whether an object committing now was removed while
// it was being written.
func (t *Tier) killedLocked(e *Entry) bool {
	if r := t.rm.activeDel[objKey{e.Tenant, e.Key}]; r != nil && r.kills(e) {
		return true
	}
	for _, r := range t.rm.activeCut {
		if r.kills(e) {
			return true
		}
	}
	return false
}

func (t *Tier) removalsActiveLocked() bool {
	return len(t.rm.activeDel) > 0 || len(t.rm.activeCut) > 0
}

// pruneRemovalsLocked forgets active removals that no uncommitted object
// can fall under any more.
func (t *Tier) pruneRemovalsLocked() {
	if !t.removalsActiveLocked() {
		return
	}
	lowest := uint64(1<<64 - 1) // lowest bucket with a writer
	for id, b := range t.buckets {
		if b.writers > 0 {
			lowest = min(lowest, id)
		}
	}
	out := t.rm.activeCut[:0]
	for _, r := range t.rm.activeCut {
		if lowest <= r.Before {
			out = append(out, r)
		}
	}
	clear(t.rm.activeCut[len(out):])
	t.rm.activeCut = out
	for k, r := range t.rm.activeDel {
		if lowest > r.Before {
			delete(t.rm.activeDel, k)
		}
	}
}

// appendRemovals appends encoded records to the log and fdatasyncs it.
func (t *Tier) appendRemovals(buf []byte) error {
	t.rm.logMu.Lock()
	defer t.rm.logMu.Unlock()
	if t.rm.file == nil {
		// Never replace a log that could not be rewritten at Open: its
		// records still matter.
		return errors.New("the removals log could not be opened at start (read-only file system?)")
	}
	if _, err := t.rm.file.WriteAt(buf, t.rm.size); err != nil {
		// A torn append is dropped by recovery; the next one overwrites it.
		return err
	}
	if err := t.rm.file.Sync(); err != nil {
		return err
	}
	t.rm.size += int64(len(buf))
	return nil
}

// createRemovals writes a new log holding recs (temp file, fdatasync,
// rename, directory fsync) and opens it for appends. Called with logMu
// held or before the tier is shared.
func (t *Tier) createRemovals(recs []remRecord) error {
	buf := encodeRemovalsHeader()
	for _, r := range recs {
		buf = appendRemoval(buf, r)
	}
	tmp, path := filepath.Join(t.dir, removalsTmpFile), filepath.Join(t.dir, removalsFile)
	f, err := t.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644, false)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(buf, 0)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = t.fs.Rename(tmp, path)
	}
	if err == nil {
		err = t.fs.SyncDir(t.dir)
	}
	if err != nil {
		_ = f.Close()
		_ = t.fs.Remove(tmp)
		return err
	}
	if t.rm.file != nil {
		_ = t.rm.file.Close()
	}
	t.rm.file, t.rm.size = f, int64(len(buf))
	return nil
}

// readRemovals reads the log at recovery. A missing log is empty; a torn
// last record is dropped; a corrupt log is moved to quarantine/ and
// reported, and recovery then quarantines every bucket (a lost record could
// bring removed objects back: nothing is served rather than that).
func (t *Tier) readRemovals() (recs []remRecord, corrupt error) {
	path := filepath.Join(t.dir, removalsFile)
	_ = t.fs.Remove(filepath.Join(t.dir, removalsTmpFile)) // a crash while compacting: the old log is intact
	raw, err := t.readSmall(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var d decodedRemovals
	if err == nil {
		d, err = decodeRemovals(raw)
	}
	if err != nil {
		qdir := filepath.Join(t.dir, quarantineDir)
		if t.fs.MkdirAll(qdir, 0o755) == nil {
			dst := filepath.Join(qdir, fmt.Sprintf("%s.%d", removalsFile, t.clock.Now().UnixNano()))
			if t.fs.Rename(path, dst) == nil {
				_ = t.fs.SyncDir(t.dir)
			}
		}
		return nil, fmt.Errorf("removals log unreadable: %w", err)
	}
	if d.Torn {
		t.st.torn.Add(1)
		t.log.Warn("ssd: dropped torn trailing record of the removals log")
	}
	for i := range d.Records {
		if err := d.Records[i].compile(); err != nil {
			// Recorded by this build after compiling: treat as corruption.
			return nil, fmt.Errorf("removals log: cutoff pattern %q: %w", d.Records[i].Pattern, err)
		}
	}
	return d.Records, nil
}

// applyRemovalsAtRecovery drops every loaded object a record removes, then
// builds the index (the oldest surviving copy of a key wins), and rewrites
// the log with only the records that still apply to a bucket (compaction).
func (t *Tier) applyRemovalsAtRecovery(recs []remRecord) {
	ids := make([]uint64, 0, len(t.buckets))
	for id := range t.buckets {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	dead := 0
	for _, id := range ids {
		b := t.buckets[id]
		offs := make([]uint64, 0, len(b.extents))
		for off := range b.extents {
			offs = append(offs, off)
		}
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
		for _, off := range offs {
			e := b.extents[off]
			killed := false
			for i := range recs {
				if recs[i].Before >= id && recs[i].kills(e) {
					killed = true
					break
				}
			}
			if killed {
				delete(b.extents, off)
				dead++
				continue
			}
			k := objKey{e.Tenant, e.Key}
			if _, dup := t.index[k]; !dup {
				t.index[k] = e // first (oldest) copy wins; a later duplicate is dead space
			}
		}
	}
	var keep []remRecord
	for _, r := range recs {
		if len(ids) > 0 && ids[0] <= r.Before {
			keep = append(keep, r)
		}
	}
	if dead > 0 || len(recs) > 0 {
		t.log.Info("ssd: removals applied", "records", len(recs), "records_kept", len(keep), "objects_removed", dead)
	}
	if err := t.createRemovals(keep); err != nil {
		// Read-only file system: the old log stays, Remove will fail.
		t.log.Warn("ssd: cannot rewrite the removals log", "err", err)
	}
}
