package master

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// histModel is the reference FIFO: a queue of at most limit places; taken
// and aged entries stay as dead places until they leave the front. An
// entry is valid while fewer than maxAge puts of new entries came after it.
type histModel struct {
	limit  int
	maxAge int64
	seq    uint32
	q      []histModelEnt
}

type histModelEnt struct {
	fp    uint32
	count uint16
	seq   uint32
	alive bool
}

func (h *histModel) find(fp uint32) int {
	for i := range h.q {
		if h.q[i].alive && h.q[i].fp == fp {
			return i
		}
	}
	return -1
}

func (h *histModel) put(fp uint32, c uint32) {
	h.seq++
	if h.limit <= 0 {
		return
	}
	c16 := uint16(min(c, 65535))
	if i := h.find(fp); i >= 0 {
		if int64(h.seq-h.q[i].seq) < h.maxAge {
			h.q[i].count = c16
			return
		}
		h.q[i].alive = false
	}
	if len(h.q) == h.limit {
		h.q = h.q[1:]
	}
	h.q = append(h.q, histModelEnt{fp, c16, h.seq, true})
}

func (h *histModel) take(fp uint32) (uint32, bool) {
	if i := h.find(fp); i >= 0 {
		h.q[i].alive = false
		return uint32(h.q[i].count), int64(h.seq-h.q[i].seq) < h.maxAge
	}
	return 0, false
}

// runHistoryOps applies ops decoded from data to a history and the model,
// comparing every answer and checking the history's consistency. Entries
// never age unless an op sets a small maximum age.
func runHistoryOps(t *testing.T, data []byte) {
	var h history
	ref := histModel{maxAge: 1 << 30}
	fpOf := func(b byte) uint32 {
		if b&0x80 != 0 { // spread homes
			return uint32(b&0x1f)*0x9E3779B1 | 1
		}
		return uint32(b&0x1f) + 1 // all share home slot 0: long probe runs
	}
	for i := 0; i+1 < len(data); i += 2 {
		op, arg := data[i]%5, data[i+1]
		switch op {
		case 0, 1:
			fp, c := fpOf(arg), uint32(data[i])
			ref.put(fp, c)
			h.put(fp, c, ref.seq, ref.maxAge)
		case 2:
			fp := fpOf(arg)
			c, ok := h.take(fp, ref.seq, ref.maxAge)
			rc, rok := ref.take(fp)
			if ok != rok || (ok && c != rc) {
				t.Fatalf("step %d: take(%#x) = %d,%v; model %d,%v", i/2, fp, c, ok, rc, rok)
			}
		case 3:
			l := h.limit + int(arg%8)
			h.setLimit(l)
			ref.limit = max(ref.limit, l)
		case 4:
			ref.maxAge = 1 + int64(arg%24)
		}
		if err := h.check(); err != nil {
			t.Fatalf("step %d: %v", i/2, err)
		}
		alive, valid := 0, 0
		for _, e := range ref.q {
			if e.alive {
				alive++
				if int64(ref.seq-e.seq) < ref.maxAge {
					valid++
				}
			}
		}
		if alive != h.live || valid != h.valid(ref.seq, ref.maxAge) {
			t.Fatalf("step %d: %d held, %d valid; model %d, %d", i/2, h.live, h.valid(ref.seq, ref.maxAge), alive, valid)
		}
	}
	for _, e := range ref.q { // everything the model holds is there with its count and sequence
		if !e.alive {
			continue
		}
		if i := h.find(e.fp); i < 0 || h.counts[h.index[i]-1] != e.count || h.seqs[h.index[i]-1] != e.seq {
			t.Fatalf("fingerprint %#x (count %d, seq %d) lost", e.fp, e.count, e.seq)
		}
	}
}

func TestHistoryFIFO(t *testing.T) {
	var h history
	var seq uint32
	const never = 1 << 30
	put := func(fp, c uint32) { seq++; h.put(fp, c, seq, never) }
	take := func(fp uint32) (uint32, bool) { return h.take(fp, seq, never) }
	h.setLimit(3)
	for fp := uint32(1); fp <= 4; fp++ {
		put(fp, fp*10)
	}
	if _, ok := take(1); ok {
		t.Fatal("oldest entry kept past the limit")
	}
	put(3, 33) // known: new count, same FIFO place
	put(5, 50) // drops 2, the oldest
	if _, ok := take(2); ok {
		t.Fatal("2 should have left the FIFO")
	}
	if c, ok := take(3); !ok || c != 33 {
		t.Fatalf("take(3) = %d,%v", c, ok)
	}
	if _, ok := take(3); ok {
		t.Fatal("take must forget")
	}
	h.setLimit(5) // a wrapped ring grows oldest first
	put(6, 60)
	put(7, 70)
	for _, fp := range []uint32{4, 5, 6, 7} {
		if c, ok := take(fp); !ok || c != fp*10 {
			t.Fatalf("take(%d) = %d,%v", fp, c, ok)
		}
	}
	put(8, 1<<20) // counts saturate
	if c, _ := take(8); c != 65535 {
		t.Fatalf("count %d", c)
	}
	if err := h.check(); err != nil {
		t.Fatal(err)
	}
}

// TestHistoryAges checks the master-wide validity rule: an entry is valid
// while fewer than maxAge evictions were remembered after it, wherever they
// went, and the sequence may wrap.
func TestHistoryAges(t *testing.T) {
	var h history
	h.setLimit(100)
	seq := uint32(1<<32 - 3) // wraps below
	h.put(1, 7, seq, 4)
	h.put(2, 8, seq+1, 4)
	if c, ok := h.take(1, seq+3, 4); !ok || c != 7 { // 3 evictions later: valid
		t.Fatalf("take(1) after 3 = %d,%v", c, ok)
	}
	if _, ok := h.take(2, seq+5, 4); ok { // 4 later (across the wrap): aged
		t.Fatal("entry 2 valid 4 evictions later with maxAge 4")
	}
	if h.live != 0 {
		t.Fatalf("an aged take must forget the entry: %d held", h.live)
	}
	h.put(3, 1, seq+6, 4)
	h.put(3, 9, seq+7, 4) // valid: keeps its sequence, takes the count
	if pos := h.index[h.find(3)] - 1; h.seqs[pos] != seq+6 || h.counts[pos] != 9 {
		t.Fatalf("known valid put: seq %d count %d", h.seqs[pos], h.counts[pos])
	}
	h.put(3, 5, seq+10, 4) // aged: forgotten, remembered again as new
	if c, ok := h.take(3, seq+13, 4); !ok || c != 5 {
		t.Fatalf("re-remembered aged entry: %d,%v", c, ok)
	}
	if err := h.check(); err != nil {
		t.Fatal(err)
	}
}

func TestHistoryAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for round := 0; round < 200; round++ {
		data := make([]byte, 2*(50+r.IntN(400)))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		data[0], data[1] = 3, byte(1+r.IntN(7)) // start with a limit
		runHistoryOps(t, data)
	}
}

// FuzzHistory drives the eviction history's FIFO and its probing index
// against the reference queue.
func FuzzHistory(f *testing.F) {
	f.Add([]byte{3, 3, 0, 1, 0, 2, 0, 3, 0, 4, 2, 1, 2, 4})
	f.Add([]byte{3, 2, 0, 0x81, 0, 0x82, 0, 1, 3, 5, 0, 2, 2, 0x81, 0, 3, 2, 1})
	f.Add([]byte{3, 7, 0, 1, 0, 2, 0, 3, 0, 4, 2, 2, 0, 5, 0, 6, 0, 7, 0, 8, 2, 3, 2, 8})
	f.Add([]byte{3, 7, 4, 2, 0, 1, 0, 2, 0, 3, 2, 1, 0, 0x81, 0, 2, 0, 4, 2, 2, 4, 5, 0, 3, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 2000 {
			data = data[:2000]
		}
		runHistoryOps(t, data)
	})
}

// historyScenario: 35 hard-pinned objects hold DRAM just under the
// watermark; "hot" is read three times and evicted (the only candidate);
// then "hot" and, a second later, the one-off "cold" are put and one of
// them must go. It returns whether hot survived.
func historyScenario(t *testing.T, cfg Config) (m *Master, hotKept bool) {
	t.Helper()
	cfg.OffloadMode, cfg.EvictionRatio = OffloadOff, 0.01
	m, fc := newTest(t, cfg)
	mountMem(t, m, "a", "a/0", 40*64) // watermark 36 objects; target one object
	for i := 0; i < 35; i++ {
		putCfg(t, m, "w", fmt.Sprintf("pin%02d", i), 64, PutConfig{Replicas: 1, HardPin: true})
	}
	put(t, m, "w", "hot", 64)
	for i := 0; i < 3; i++ {
		fc.Advance(time.Second)
		if _, err := m.GetReplicaList(ctx, "r", "", "hot"); err != nil {
			t.Fatal(err)
		}
	}
	put(t, m, "w", "filler", 64) // 37 objects: above the watermark
	fc.Advance(10 * time.Minute)
	if _, err := m.GetReplicaList(ctx, "r", "", "filler"); err != nil { // filler leased: hot is the only candidate
		t.Fatal(err)
	}
	if rep := m.EvictNow(ctx); rep.FreedObjects != 1 || exists(t, m, "hot") {
		t.Fatalf("hot not evicted: %+v", rep)
	}
	if err := m.Remove(ctx, "", "filler", true); err != nil {
		t.Fatal(err)
	}
	fc.Advance(time.Minute)
	put(t, m, "w", "hot", 64)
	fc.Advance(time.Second)
	put(t, m, "w", "cold", 64) // 37 objects again
	fc.Advance(time.Second)
	if rep := m.EvictNow(ctx); rep.FreedObjects != 1 || rep.Candidates != 2 {
		t.Fatalf("want one of hot and cold freed: %+v", rep)
	}
	hot, cold := exists(t, m, "hot"), exists(t, m, "cold")
	if hot == cold {
		t.Fatalf("hot %v, cold %v: exactly one must go", hot, cold)
	}
	return m, hot
}

func TestEvictionHistoryKeepsHotKey(t *testing.T) {
	m, kept := historyScenario(t, Config{})
	if !kept {
		t.Fatal("with the history, the re-put hot key must outlive the one-off keys")
	}
	if got := ctrOf(m, "eviction_history_hits"); got != 1 {
		t.Fatalf("eviction_history_hits = %d", got)
	}
	info, err := m.GetObject(ctx, "", "hot")
	if err != nil || info.ReadCount != 4 || !info.LeaseDeadline.IsZero() {
		t.Fatalf("re-put hot: read count %d (want 3+1), lease %v, err %v", info.ReadCount, info.LeaseDeadline, err)
	}
	if err := m.Remove(ctx, "", "hot", false); err != nil {
		t.Fatalf("a seeded read count is no lease: %v", err)
	}

	_, kept = historyScenario(t, Config{EvictionHistory: -1})
	if kept {
		t.Fatal("without the history the older hot key goes first (the test must tell them apart)")
	}
	_, kept = historyScenario(t, Config{LeasePolicy: PolicyPlain})
	if kept {
		t.Fatal("plain ignores read counts")
	}
}

func TestExistDoesNotTouchHistory(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff, EvictionRatio: 0.2})
	mountMem(t, m, "a", "a/0", 10*64)
	for i := 0; i < 10; i++ {
		put(t, m, "w", fmt.Sprintf("k%02d", i), 64)
		m.GetReplicaList(ctx, "r", "", fmt.Sprintf("k%02d", i))
	}
	fc.Advance(time.Hour)
	m.EvictNow(ctx)
	st := m.historyStats()
	if st.entries == 0 {
		t.Fatal("eviction remembered nothing")
	}
	var gone []string
	for i := 0; i < 10; i++ {
		if k := fmt.Sprintf("k%02d", i); !exists(t, m, k) {
			gone = append(gone, k)
		}
	}
	if len(gone) != 2 || st.entries != 2 {
		t.Fatalf("evicted %v, history %+v: want two of each", gone, st)
	}
	for i := 0; i < 5; i++ {
		if oks, _ := m.BatchExist(ctx, "", gone); oks[0] {
			t.Fatal("evicted key exists")
		}
		m.GetReplicaList(ctx, "r", "", gone[0]) // a miss takes nothing either
	}
	if st2 := m.historyStats(); st2.entries != st.entries || ctrOf(m, "eviction_history_hits") != 0 {
		t.Fatalf("Exist or a get miss changed the history: %+v → %+v", st, st2)
	}
	if _, err := m.PutStart(ctx, putReq("w", gone[0], 64)); err != nil {
		t.Fatal(err)
	}
	if m.historyStats().entries != st.entries {
		t.Fatal("PutStart consumed the entry; PutEnd does")
	}
	if err := m.PutEnd(ctx, "w", "", gone[0]); err != nil {
		t.Fatal(err)
	}
	if m.historyStats().entries != st.entries-1 || ctrOf(m, "eviction_history_hits") != 1 {
		t.Fatal("PutEnd of a remembered key must take its entry")
	}
	if info, _ := m.GetObject(ctx, "", gone[0]); info.ReadCount != 2 {
		t.Fatalf("read count %d, want 1+1", info.ReadCount)
	}
	// Another tenant's key of the same name is another key.
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Tenant: "other", Key: gone[1], Size: 64, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := m.PutEnd(ctx, "w", "other", gone[1]); err != nil {
		t.Fatal(err)
	}
	if info, _ := m.GetObject(ctx, "other", gone[1]); info.ReadCount != 0 || ctrOf(m, "eviction_history_hits") != 1 {
		t.Fatalf("tenant other inherited tenant default's count %d", info.ReadCount)
	}
}

func TestEvictionHistoryBounded(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff, EvictionHistory: 512})
	mountMem(t, m, "a", "a/0", 100*64)
	for i := 0; i < 3000; i++ { // allocation failures evict; every key read once
		k := fmt.Sprintf("key%05d", i)
		put(t, m, "w", k, 64)
		m.GetReplicaList(ctx, "r", "", k)
		fc.Advance(10 * time.Second)
	}
	st := m.historyStats()
	if st.limit != 512 || st.entries > 512 || st.entries < 256 {
		t.Fatalf("history %+v: want at most 512 entries (2 per shard) and most of them used", st)
	}
	checkInv(t, m)

	d, _ := newTest(t, Config{})
	if d.historyStats().limit != evictionHistoryMin {
		t.Fatal("default starts at the minimum")
	}
	d.growHistory(2000)
	d.growHistory(10) // never shrinks
	if got := d.historyStats().limit; got != 8000 {
		t.Fatalf("limit %d, want 4 × 2000", got)
	}
	d.growHistory(10_000_000)
	if got := d.historyStats().limit; got != evictionHistoryMax {
		t.Fatalf("limit %d, want the cap", got)
	}
	if err := (Config{EvictionHistory: maxEvictionHistory + 1}).Validate(); err == nil {
		t.Fatal("oversized history accepted")
	}
}

// TestFrequencyKeyIsMinOfBonusAndCap pins the one formula the simulator
// shares: min(reads×Bonus, MaxBonus), also where MaxBonus/Bonus rounds down.
func TestFrequencyKeyIsMinOfBonusAndCap(t *testing.T) {
	p := FrequencyPolicy{Bonus: DefaultFrequencyBonus, MaxBonus: DefaultFrequencyMaxBonus}
	for reads, want := range map[uint32]time.Duration{0: 0, 1: 270 * time.Second, 2: 330 * time.Second, 1 << 31: 330 * time.Second, ^uint32(0): 330 * time.Second} {
		if got := p.EvictionKey(1000, reads) - 1000; got != int64(want) {
			t.Errorf("reads %d: bonus %v, want %v", reads, time.Duration(got), want)
		}
	}
	if (FrequencyPolicy{Bonus: 0, MaxBonus: time.Hour}).EvictionKey(5, 9) != 5 || (FrequencyPolicy{Bonus: time.Second}).EvictionKey(5, 9) != 5 {
		t.Error("a zero bonus or cap must add nothing")
	}
}

// remembered reports whether key's read count is in the history and valid,
// without taking it.
func remembered(m *Master, key string) bool {
	c := ck(DefaultTenant, key)
	sh := m.shardOf(c)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.hist.find(histFingerprint(m.ckHash(c)))
	return i >= 0 && !aged(m.histSeq.Load(), sh.hist.seqs[sh.hist.index[i]-1], m.histLimit.Load())
}

// TestEvictionHistoryIsMasterWide: the history remembers exactly the last
// EvictionHistory evicted keys, however they spread over the shards (a
// per-shard FIFO of the shard's share would keep some older keys and lose
// some newer ones).
func TestEvictionHistoryIsMasterWide(t *testing.T) {
	const limit = 300
	m, fc := newTest(t, Config{OffloadMode: OffloadOff, EvictionHistory: limit})
	mountMem(t, m, "a", "a/0", 100*64)
	var evicted []string
	sub := m.Subscribe(1 << 14)
	defer sub.Close()
	for i := 0; i < 2000; i++ { // allocation failures evict; every key read once
		k := fmt.Sprintf("key%05d", i)
		put(t, m, "w", k, 64)
		m.GetReplicaList(ctx, "r", "", k)
		fc.Advance(10 * time.Second)
	drain:
		for {
			select {
			case ev := <-sub.C():
				if ev.Kind == "evict" {
					evicted = append(evicted, ev.Key)
				}
			default:
				break drain
			}
		}
	}
	if len(evicted) < 3*limit {
		t.Fatalf("only %d evictions seen", len(evicted))
	}
	for i, k := range evicted {
		want := i >= len(evicted)-limit
		if got := remembered(m, k); got != want {
			t.Fatalf("eviction %d of %d (%s): remembered %v, want %v", i, len(evicted), k, got, want)
		}
	}
	if st := m.historyStats(); st.entries != limit || st.held < limit {
		t.Fatalf("history %+v: want exactly %d valid entries", st, limit)
	}
}
