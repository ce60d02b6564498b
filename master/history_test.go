package master

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// histModel is the reference FIFO: a queue of at most limit entries, taken
// entries stay as dead places until they leave the front.
type histModel struct {
	limit int
	q     []histModelEnt
}

type histModelEnt struct {
	fp    uint32
	count uint16
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
	if h.limit <= 0 {
		return
	}
	c16 := uint16(min(c, 65535))
	if i := h.find(fp); i >= 0 {
		h.q[i].count = c16
		return
	}
	if len(h.q) == h.limit {
		h.q = h.q[1:]
	}
	h.q = append(h.q, histModelEnt{fp, c16, true})
}

func (h *histModel) take(fp uint32) (uint32, bool) {
	if i := h.find(fp); i >= 0 {
		h.q[i].alive = false
		return uint32(h.q[i].count), true
	}
	return 0, false
}

// runHistoryOps applies ops decoded from data to a history and the model,
// comparing every answer and checking the history's consistency.
func runHistoryOps(t *testing.T, data []byte) {
	var h history
	ref := histModel{}
	fpOf := func(b byte) uint32 {
		if b&0x80 != 0 { // spread homes
			return uint32(b&0x1f)*0x9E3779B1 | 1
		}
		return uint32(b&0x1f) + 1 // all share home slot 0: long probe runs
	}
	for i := 0; i+1 < len(data); i += 2 {
		op, arg := data[i]%4, data[i+1]
		switch op {
		case 0, 1:
			fp, c := fpOf(arg), uint32(data[i])
			h.put(fp, c)
			ref.put(fp, c)
		case 2:
			fp := fpOf(arg)
			c, ok := h.take(fp)
			rc, rok := ref.take(fp)
			if ok != rok || c != rc {
				t.Fatalf("step %d: take(%#x) = %d,%v; model %d,%v", i/2, fp, c, ok, rc, rok)
			}
		case 3:
			l := h.limit + int(arg%8)
			h.setLimit(l)
			ref.limit = max(ref.limit, l)
		}
		if err := h.check(); err != nil {
			t.Fatalf("step %d: %v", i/2, err)
		}
		alive := 0
		for _, e := range ref.q {
			if e.alive {
				alive++
			}
		}
		if alive != h.live {
			t.Fatalf("step %d: %d remembered, model %d", i/2, h.live, alive)
		}
	}
	for _, e := range ref.q { // everything the model remembers is there with its count
		if !e.alive {
			continue
		}
		if i := h.find(e.fp); i < 0 || h.counts[h.index[i]-1] != e.count {
			t.Fatalf("fingerprint %#x (count %d) lost", e.fp, e.count)
		}
	}
}

func TestHistoryFIFO(t *testing.T) {
	var h history
	h.setLimit(3)
	for fp := uint32(1); fp <= 4; fp++ {
		h.put(fp, fp*10)
	}
	if _, ok := h.take(1); ok {
		t.Fatal("oldest entry kept past the limit")
	}
	h.put(3, 33) // known: new count, same FIFO place
	h.put(5, 50) // drops 2, the oldest
	if _, ok := h.take(2); ok {
		t.Fatal("2 should have left the FIFO")
	}
	if c, ok := h.take(3); !ok || c != 33 {
		t.Fatalf("take(3) = %d,%v", c, ok)
	}
	if _, ok := h.take(3); ok {
		t.Fatal("take must forget")
	}
	h.setLimit(5) // a wrapped ring grows oldest first
	h.put(6, 60)
	h.put(7, 70)
	for _, fp := range []uint32{4, 5, 6, 7} {
		if c, ok := h.take(fp); !ok || c != fp*10 {
			t.Fatalf("take(%d) = %d,%v", fp, c, ok)
		}
	}
	h.put(8, 1<<20) // counts saturate
	if c, _ := h.take(8); c != 65535 {
		t.Fatalf("count %d", c)
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
