package ssd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/kverr"
)

func mustRemove(t testing.TB, tr *Tier, rs ...Removal) int {
	t.Helper()
	n, err := tr.Remove(context.Background(), rs)
	if err != nil {
		t.Fatalf("Remove %+v: %v", rs, err)
	}
	return n
}

func wantAbsent(t testing.TB, tr *Tier, key string, loc Location) {
	t.Helper()
	if e, ok := tr.Lookup("t", key); ok {
		t.Fatalf("%s still indexed at %+v", key, e.Loc)
	}
	if loc.Length > 0 {
		wantCode(t, tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, make([]byte, loc.Length)), kverr.ObjectNotFound)
	}
	for _, e := range tr.Objects() {
		if e.Tenant == "t" && e.Key == key {
			t.Fatalf("%s listed by Objects", key)
		}
	}
}

func wantStored(t testing.TB, tr *Tier, key string, v []byte) {
	t.Helper()
	e, ok := tr.Lookup("t", key)
	if !ok {
		t.Fatalf("%s not stored", key)
	}
	mustRead(t, tr, e.Loc, v)
}

// A removed key stays removed across restarts, and a key stored again
// after its removal is served with its new bytes, also after a restart.
func TestRemoveSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, BucketSize: 4 * Block}
	tr, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string][]byte{}
	locs := map[string]Location{}
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		vals[k] = value(uint64(i), 3000)
		locs[k] = mustPut(t, tr, k, vals[k])
	}
	if n := mustRemove(t, tr, Removal{Tenant: "t", Key: "k3"}, Removal{Tenant: "t", Key: "k7"}, Removal{Tenant: "t", Key: "absent"}); n != 2 {
		t.Fatalf("removed %d, want 2", n)
	}
	wantAbsent(t, tr, "k3", locs["k3"])
	// Stored again with other bytes: not OBJECT_ALREADY_EXISTS.
	vals["k7"] = value(77, 5000)
	mustPut(t, tr, "k7", vals["k7"])
	tr.Close()

	tr = openTier(t, cfg)
	wantAbsent(t, tr, "k3", locs["k3"])
	for k, v := range vals {
		if k != "k3" {
			wantStored(t, tr, k, v)
		}
	}
	// Remove again, restart twice (the second reads a compacted log).
	mustRemove(t, tr, Removal{Tenant: "t", Key: "k7"})
	tr.Close()
	for range 2 {
		tr, err = Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		wantAbsent(t, tr, "k7", Location{})
		wantAbsent(t, tr, "k3", Location{})
		wantStored(t, tr, "k1", vals["k1"])
		checkInvariants(t, tr)
		tr.Close()
	}
}

// A cutoff removes every matching object stored before it with one record,
// spares the kept ones, and does not touch objects stored after it.
func TestCutoffSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, BucketSize: 8 * Block}
	tr, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	locs := map[string]Location{}
	for i := range 60 {
		for _, p := range []string{"x/", "y/"} {
			k := fmt.Sprintf("%s%d", p, i)
			locs[k] = mustPut(t, tr, k, value(uint64(i), 100))
		}
	}
	before, _ := tr.fs.Stat(filepath.Join(dir, removalsFile))
	n := mustRemove(t, tr, Removal{Tenant: "t", Cutoff: true, Pattern: "^x/", Keep: []Location{locs["x/5"]}})
	if n != 59 {
		t.Fatalf("cutoff removed %d, want 59", n)
	}
	after, _ := tr.fs.Stat(filepath.Join(dir, removalsFile))
	if after-before > 100 {
		t.Fatalf("one cutoff grew the log by %d bytes", after-before)
	}
	newX1 := value(1000, 200)
	mustPut(t, tr, "x/1", newX1)
	// Another tenant is untouched.
	if _, err := tr.Put(context.Background(), "other", "x/9", value(9, 100), 0); err != nil {
		t.Fatal(err)
	}
	tr.Close()

	tr = openTier(t, cfg)
	for k, loc := range locs {
		switch {
		case k == "x/1":
			wantStored(t, tr, k, newX1)
		case k == "x/5" || k[0] == 'y':
			if e, ok := tr.Lookup("t", k); !ok || e.Loc != loc {
				t.Fatalf("%s: got %+v %v, want %+v", k, e, ok, loc)
			}
		default:
			wantAbsent(t, tr, k, loc)
		}
	}
	if _, ok := tr.Lookup("other", "x/9"); !ok {
		t.Fatal("other tenant's object removed")
	}
	// RemoveAll: the empty pattern matches every key.
	mustRemove(t, tr, Removal{Tenant: "t", Cutoff: true})
	if got := len(tr.Objects()); got != 1 {
		t.Fatalf("%d objects after RemoveAll, want 1 (other tenant)", got)
	}
}

// An object reserved before a removal and committed after it is not
// indexed, and stays absent after a restart.
func TestRemoveWhileWriting(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Dir: dir, CommitInterval: 1 << 40}
	tr, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := tr.PutAsync(ctx, "t", "a", value(1, 5000), 0)
	if err != nil {
		t.Fatal(err)
	}
	q, err := tr.PutAsync(ctx, "t", "keep", value(2, 5000), 0)
	if err != nil {
		t.Fatal(err)
	}
	mustRemove(t, tr, Removal{Tenant: "t", Key: "a"})
	if err := tr.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("removed in-flight object: %v, want OBJECT_NOT_FOUND", err)
	}
	if _, err := q.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, tr, "a", Location{})
	// Stored again after the removal: kept.
	mustPut(t, tr, "a", value(3, 100))
	tr.Close()
	tr = openTier(t, cfg)
	wantStored(t, tr, "a", value(3, 100))
	wantStored(t, tr, "keep", value(2, 5000))
}

func TestRemoveBadInput(t *testing.T) {
	tr := openTier(t, Config{})
	mustPut(t, tr, "a", value(1, 10))
	for _, r := range []Removal{
		{Tenant: "t"},
		{Tenant: "t", Cutoff: true, Pattern: "("},
		{Tenant: "t", Cutoff: true, Pattern: string(make([]byte, MaxRemovalPattern+1))},
		{Tenant: "t", Cutoff: true, Key: "a"},
	} {
		_, err := tr.Remove(context.Background(), []Removal{{Tenant: "t", Key: "a"}, r})
		wantCode(t, err, kverr.InvalidParams)
	}
	wantStored(t, tr, "a", value(1, 10)) // nothing of a refused batch applied
}

// A torn last record is dropped; damage before the last record quarantines
// every bucket (which objects were removed is unknown).
func TestRemovalsLogDamage(t *testing.T) {
	setup := func(t *testing.T) (string, Config) {
		dir := t.TempDir()
		cfg := Config{Dir: dir, BucketSize: 4 * Block}
		tr, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			mustPut(t, tr, fmt.Sprintf("k%d", i), value(uint64(i), 3000))
		}
		mustRemove(t, tr, Removal{Tenant: "t", Key: "k1"})
		mustRemove(t, tr, Removal{Tenant: "t", Key: "k2"})
		tr.Close()
		return dir, cfg
	}
	t.Run("torn", func(t *testing.T) {
		dir, cfg := setup(t)
		path := filepath.Join(dir, removalsFile)
		raw, _ := os.ReadFile(path)
		os.WriteFile(path, raw[:len(raw)-3], 0o644)
		tr := openTier(t, cfg)
		wantAbsent(t, tr, "k1", Location{})
		wantStored(t, tr, "k2", value(2, 3000)) // its removal never returned
		if tr.Stats().TornRecords == 0 {
			t.Fatal("torn record not counted")
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		dir, cfg := setup(t)
		path := filepath.Join(dir, removalsFile)
		raw, _ := os.ReadFile(path)
		raw[removalsHdrSize+6] ^= 0xff // inside the first of two records
		os.WriteFile(path, raw, 0o644)
		tr := openTier(t, cfg)
		if got := len(tr.Objects()); got != 0 {
			t.Fatalf("%d objects served with a corrupt removals log", got)
		}
		if len(tr.Quarantined()) == 0 {
			t.Fatal("nothing quarantined")
		}
		// The tier keeps working with a fresh log.
		mustPut(t, tr, "new", value(9, 10))
		mustRemove(t, tr, Removal{Tenant: "t", Key: "new"})
	})
}

// TestRemovalRecoveryTable runs sequences of puts, removals, cutoffs and
// restarts against a model and checks after every restart that the tier
// serves exactly the model's objects, byte for byte.
func TestRemovalRecoveryTable(t *testing.T) {
	for _, ops := range []string{
		"p0 p1 r0 R p0 R",
		"p0 p1 p2 p3 c R p1 R r1 R",
		"p0 x0 p0 R r0 r0 R p0 R",
		"p0 p1 p2 p3 p4 p5 p6 p7 cx R px1 px3 R c R",
		"p0 R r0 R p0 R r0 p0 r0 R",
	} {
		t.Run(ops, func(t *testing.T) { runRemovalOps(t, []byte(ops)) })
	}
}

// FuzzRemovalRecovery is TestRemovalRecoveryTable over arbitrary sequences.
func FuzzRemovalRecovery(f *testing.F) {
	f.Add([]byte("p0 p1 r0 R p0 R"))
	f.Add([]byte("p0 p1 p2 p3 c R p1 R r1 R"))
	f.Add([]byte("p0 p1 cx px1 R"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			return
		}
		runRemovalOps(t, ops)
	})
}

// runRemovalOps interprets ops: "pN" puts key N (new bytes each time it is
// absent), "rN" removes it, "c" removes every key, "cx" every key of the
// "x" prefix (keys N put with "pxN"), "R" restarts the tier.
func runRemovalOps(t *testing.T, ops []byte) {
	cfg := Config{Dir: t.TempDir(), BucketSize: 2 * Block}
	tr, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { tr.Close() }()
	model := map[string][]byte{}
	gen := uint64(0)
	check := func() {
		t.Helper()
		objs := tr.Objects()
		if len(objs) != len(model) {
			t.Fatalf("after %q: %d objects served, model has %d", ops, len(objs), len(model))
		}
		for k, v := range model {
			wantStored(t, tr, k, v)
		}
		checkInvariants(t, tr)
	}
	for i := 0; i < len(ops); i++ {
		key := func() string {
			k := ""
			for i+1 < len(ops) && (ops[i+1] == 'x' || ops[i+1] >= '0' && ops[i+1] <= '9') {
				i++
				k += string(ops[i])
			}
			if k == "" || k == "x" {
				k += "0"
			}
			return k
		}
		switch ops[i] {
		case 'p':
			k := key()
			if _, ok := model[k]; ok {
				continue
			}
			gen++
			v := value(gen, int(gen%5)*1000+1)
			mustPut(t, tr, k, v)
			model[k] = v
		case 'r':
			k := key()
			mustRemove(t, tr, Removal{Tenant: "t", Key: k})
			delete(model, k)
		case 'c':
			pat := ""
			if i+1 < len(ops) && ops[i+1] == 'x' {
				i++
				pat = "^x"
			}
			mustRemove(t, tr, Removal{Tenant: "t", Cutoff: true, Pattern: pat})
			for k := range model {
				if pat == "" || k[0] == 'x' {
					delete(model, k)
				}
			}
		case 'R':
			tr.Close()
			if tr, err = Open(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			check()
		}
	}
	check()
}

// FuzzRemovalsLog: decodeRemovals never panics, classifies every error,
// and what it accepts re-encodes to the same bytes.
func FuzzRemovalsLog(f *testing.F) {
	valid := encodeRemovalsHeader()
	valid = appendRemoval(valid, remRecord{Kind: remDelete, Tenant: "t", Key: "k", Before: 3, Off: 4096})
	valid = appendRemoval(valid, remRecord{Kind: remCutoff, Tenant: "t", Pattern: "^a", Before: 9, Keep: []Location{{Bucket: 1, Offset: 0}}})
	f.Add(valid)
	f.Add(valid[:len(valid)-5])
	f.Add(append(slices.Clone(valid), make([]byte, 40)...))
	f.Add(encodeRemovalsHeader())
	f.Add([]byte("KVTSSDRM"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := decodeRemovals(raw)
		if err != nil {
			if !errors.Is(err, errRemovals) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if d.Valid < removalsHdrSize || d.Valid > len(raw) {
			t.Fatalf("valid %d out of range", d.Valid)
		}
		re := encodeRemovalsHeader()
		for _, r := range d.Records {
			re = appendRemoval(re, r)
		}
		if !bytes.Equal(re[removalsHdrSize:], raw[removalsHdrSize:d.Valid]) {
			t.Fatal("accepted records do not re-encode to themselves")
		}
	})
}
