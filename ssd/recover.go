package ssd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

const osCreateRW = os.O_RDWR | os.O_CREATE | os.O_EXCL

// QuarantineError says why a bucket was set aside at recovery. Its files are
// moved to Dir/quarantine/ (or, when that fails, left in place and ignored);
// none of its objects is served.
type QuarantineError struct {
	Bucket uint64
	Reason string
	Err    error // the underlying decode or I/O error, if any
	Moved  bool  // files moved to the quarantine directory
}

func (q *QuarantineError) Error() string {
	s := fmt.Sprintf("ssd: bucket %d quarantined: %s", q.Bucket, q.Reason)
	if q.Err != nil {
		s += ": " + q.Err.Error()
	}
	if !q.Moved {
		s += " (files left in place)"
	}
	return s
}

func (q *QuarantineError) Unwrap() error { return q.Err }

// recover builds the index from the files in Dir. Every intact bucket is
// served (sealed: appends go to a new bucket); a bucket whose metadata
// header or a non-final record is corrupt, whose data file is missing or
// shorter than its records claim, is quarantined; a torn trailing record is
// dropped (and cut off the file when the directory is writable).
func (t *Tier) recover(ctx context.Context) error {
	names, err := t.fs.ReadDir(t.dir)
	if err != nil {
		return kverr.New(kverr.FileReadFail, "", "ssd: cannot list %s: %v", t.dir, err)
	}
	type pair struct{ data, meta bool }
	found := make(map[uint64]*pair)
	var maxID uint64
	for _, n := range names {
		id, kind, ok := parseBucketName(n)
		if !ok {
			if n == idsTmpFile {
				_ = t.fs.Remove(filepath.Join(t.dir, n)) // a crash while renaming: the old file is intact
			}
			continue
		}
		p := found[id]
		if p == nil {
			p = &pair{}
			found[id] = p
		}
		if kind == dataSuffix {
			p.data = true
		} else {
			p.meta = true
		}
		maxID = max(maxID, id)
	}
	if qnames, err := t.fs.ReadDir(filepath.Join(t.dir, quarantineDir)); err == nil {
		for _, n := range qnames {
			if id, _, ok := parseBucketName(n); ok {
				maxID = max(maxID, id)
			}
		}
	}
	if raw, err := t.readSmall(filepath.Join(t.dir, idsFile)); err == nil {
		if next, derr := decodeIDs(raw); derr == nil {
			t.nextID = max(t.nextID, next)
		} else {
			t.log.Warn("ssd: ignoring bucket-ids file", "err", derr)
		}
	}
	t.nextID = max(t.nextID, maxID+1)

	ids := make([]uint64, 0, len(found))
	for id := range found {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	recs, corrupt := t.readRemovals()
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			t.closeLoaded()
			return err
		}
		p := found[id]
		switch {
		case corrupt != nil:
			// Which objects were removed is unknown: serve none of them.
			t.quarantine(id, "removals log corrupt", corrupt)
		case p.data && !p.meta:
			// Crashed between creating the data file and its metadata, or
			// between eviction's two removals: no record can point here.
			t.removeOrphan(filepath.Join(t.dir, dataName(id)))
		case p.meta && !p.data:
			t.recoverMetaOnly(id)
		default:
			t.loadBucket(id)
		}
	}
	t.applyRemovalsAtRecovery(recs)
	t.log.Info("ssd: recovered", "dir", t.dir, "buckets", len(t.buckets), "objects", len(t.index),
		"quarantined", len(t.quarantined), "next_bucket", t.nextID)
	return nil
}

func (t *Tier) removeOrphan(path string) {
	if err := t.fs.Remove(path); err != nil {
		t.log.Warn("ssd: cannot remove orphan file", "file", path, "err", err)
		return
	}
	t.st.orphans.Add(1)
}

func (t *Tier) recoverMetaOnly(id uint64) {
	mp := filepath.Join(t.dir, metaName(id))
	raw, err := t.readSmall(mp)
	if err == nil {
		if d, derr := decodeMeta(raw); derr == nil && len(d.Records) == 0 {
			t.removeOrphan(mp) // an empty bucket whose data file is gone: nothing lost
			return
		}
	}
	t.quarantine(id, "data file missing", err)
}

// loadBucket validates one bucket and adds it to the index, or quarantines it.
func (t *Tier) loadBucket(id uint64) {
	mp, dp := filepath.Join(t.dir, metaName(id)), filepath.Join(t.dir, dataName(id))
	raw, err := t.readSmall(mp)
	if err != nil {
		t.quarantine(id, "metadata file unreadable", err)
		return
	}
	d, err := decodeMeta(raw)
	if err != nil {
		if size, serr := t.fs.Stat(dp); serr == nil && size == 0 && errors.Is(err, errMetaHeader) {
			// Crashed while creating the bucket, before any object: nothing to lose.
			t.removeOrphan(mp)
			t.removeOrphan(dp)
			return
		}
		t.quarantine(id, "corrupt metadata", err)
		return
	}
	if d.Header.Bucket != id {
		t.quarantine(id, fmt.Sprintf("metadata header names bucket %d", d.Header.Bucket), nil)
		return
	}
	dsize, err := t.fs.Stat(dp)
	if err != nil {
		t.quarantine(id, "data file unreadable", err)
		return
	}
	// Extents must lie inside the data file and not overlap.
	recs := append([]metaRecord(nil), d.Records...)
	sort.Slice(recs, func(i, j int) bool { return recs[i].Offset < recs[j].Offset })
	var end uint64
	for i, r := range recs {
		if r.Offset+r.Length > uint64(dsize) {
			t.quarantine(id, fmt.Sprintf("data file has %d bytes, metadata claims object %q at %d+%d", dsize, r.Key, r.Offset, r.Length), nil)
			return
		}
		if i > 0 && r.Offset < end {
			t.quarantine(id, fmt.Sprintf("objects overlap at offset %d", r.Offset), nil)
			return
		}
		end = r.Offset + padded(r.Length)
	}
	if uint64(dsize) > end && len(recs) > 0 {
		// Preallocated blocks or bytes of objects never committed lie past
		// the last object: free them.
		if err := t.truncate(dp, int64(end)); err == nil {
			dsize = int64(end)
		}
	}
	metaSize := len(raw)
	if d.Torn {
		t.st.torn.Add(1)
		t.log.Warn("ssd: dropped torn trailing metadata record", "bucket", id)
		if err := t.truncate(mp, int64(d.Valid)); err != nil {
			t.log.Warn("ssd: cannot cut torn record off metadata file; it is ignored", "bucket", id, "err", err)
		} else {
			metaSize = d.Valid
		}
	}
	if len(d.Records) == 0 {
		// Created and crashed (or torn) before its first object: nothing to keep.
		t.removeOrphan(mp)
		t.removeOrphan(dp)
		return
	}
	data, err := t.fs.OpenFile(dp, os.O_RDONLY, 0, true)
	if err != nil {
		t.quarantine(id, "data file cannot be opened", err)
		return
	}
	b := &bucket{
		id:        id,
		created:   time.Unix(0, d.Header.Created),
		data:      data,
		sealed:    true,
		reserved:  uint64(dsize),
		nobj:      len(d.Records),
		used:      uint64(dsize) + uint64(metaSize),
		extents:   make(map[uint64]*Entry, len(d.Records)),
		dataPath:  dp,
		metaPath:  mp,
		metaLen:   int64(d.Valid),
		metaAlloc: int64(metaSize),
	}
	b.lastUse = b.created
	for _, r := range d.Records {
		e := &Entry{Tenant: r.Tenant, Key: r.Key, Size: r.Length, CRC32C: r.CRC32C,
			Loc: Location{Bucket: id, Offset: r.Offset, Length: r.Length}}
		b.extents[r.Offset] = e // indexed by applyRemovalsAtRecovery
	}
	t.buckets[id] = b
	t.used += b.used
}

// quarantine moves a bucket's files to Dir/quarantine/ and records why.
func (t *Tier) quarantine(id uint64, reason string, cause error) {
	q := &QuarantineError{Bucket: id, Reason: reason, Err: cause}
	qdir := filepath.Join(t.dir, quarantineDir)
	moveErr := t.fs.MkdirAll(qdir, 0o755)
	if moveErr == nil {
		for _, n := range []string{metaName(id), dataName(id)} {
			src := filepath.Join(t.dir, n)
			if _, err := t.fs.Stat(src); err != nil {
				continue
			}
			dst := filepath.Join(qdir, n)
			for i := 1; ; i++ {
				if _, err := t.fs.Stat(dst); errors.Is(err, os.ErrNotExist) {
					break
				}
				dst = filepath.Join(qdir, fmt.Sprintf("%s.%d", n, i))
			}
			if err := t.fs.Rename(src, dst); err != nil {
				moveErr = err
			}
		}
		_ = t.fs.SyncDir(t.dir)
	}
	q.Moved = moveErr == nil
	if moveErr != nil {
		t.log.Warn("ssd: cannot move quarantined bucket; left in place and ignored", "bucket", id, "err", moveErr)
	}
	t.log.Warn("ssd: bucket quarantined", "bucket", id, "reason", reason, "err", cause)
	t.quarantined = append(t.quarantined, q)
}

// readSmall reads a whole metadata-sized file through the FS (buffered).
func (t *Tier) readSmall(path string) ([]byte, error) {
	f, err := t.fs.OpenFile(path, os.O_RDONLY, 0, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(buf)) {
		return nil, err
	}
	return buf[:n], nil
}

func (t *Tier) truncate(path string, size int64) error {
	f, err := t.fs.OpenFile(path, os.O_RDWR, 0, false)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeIDs durably records that bucket ids below next are taken, so ids keep
// increasing across restarts even after every bucket was evicted.
func (t *Tier) writeIDs(next uint64) error {
	tmp := filepath.Join(t.dir, idsTmpFile)
	f, err := t.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644, false)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(encodeIDs(next), 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = t.fs.Rename(tmp, filepath.Join(t.dir, idsFile))
	}
	if err != nil {
		_ = t.fs.Remove(tmp)
		return err
	}
	return t.fs.SyncDir(t.dir)
}

// closeLoaded closes the files of buckets loaded so far (Open failing).
func (t *Tier) closeLoaded() {
	for _, b := range t.buckets {
		_ = b.data.Close()
	}
}
