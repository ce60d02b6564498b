package grant

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestRevocations(t *testing.T) {
	const ob, other = 0xA1, 0xB2
	now := time.Now().UnixNano()
	until := now + int64(time.Minute)
	g := func(outbox, seq, off uint64) *Grant { return &Grant{Outbox: outbox, Seq: seq, Offset: off, Length: 64} }
	r := NewRevocations(0)
	want := func(what string, gr *Grant, seg string, reason Reason) {
		t.Helper()
		if got := ReasonOf(r.Check(gr, seg, 20*time.Millisecond, nil)); got != reason {
			t.Fatalf("%s: got reason %v, want %v", what, got, reason)
		}
	}
	// Following no stream: nothing is checked (a GPU node's own segment).
	want("no stream", g(ob, 99, 0), "seg", 0)
	r.Follow(ob)
	want("unplaced grant", g(0, 0, 0), "seg", 0)
	want("records not applied yet", g(ob, 5, 0), "seg", Revoked)
	r.Applied(4)
	// A grant waiting for its records is served once they are applied.
	done := make(chan error, 1)
	go func() { done <- r.Check(g(ob, 5, 0), "seg", 5*time.Second, nil) }()
	time.Sleep(10 * time.Millisecond)
	r.Revoke("seg", 4096, 5, until, now) // another extent's free
	r.Applied(5)
	if err := <-done; err != nil {
		t.Fatalf("waiting grant: %v", err)
	}
	want("extent freed after signing", g(ob, 4, 4096), "seg", Revoked)
	want("signed after the free (new occupant)", g(ob, 5, 4096), "seg", 0)
	want("same offset, other segment", g(ob, 4, 4096), "seg2", 0)
	want("other extent", g(ob, 4, 0), "seg", 0)
	want("other outbox", g(other, 1, 0), "seg", Revoked)
	// A later free of the same extent voids the new occupant's grants too.
	r.Revoke("seg", 4096, 9, until, now)
	r.Applied(9)
	want("second free", g(ob, 5, 4096), "seg", Revoked)
	want("after the second free", g(ob, 9, 4096), "seg", 0)
	// Entries are dropped once every grant they void has expired.
	r.Revoke("seg", 8192, 10, now+1, now)
	if n := r.Len(); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	r.Revoke("seg", 0, 11, until+2, until+1)
	if n := r.Len(); n != 1 {
		t.Fatalf("%d entries after expiry, want 1 (%s)", n, r)
	}
	r.Revoke("seg", 64, 12, now, now) // already expired: not kept
	if n := r.Len(); n != 1 {
		t.Fatalf("expired revocation kept: %s", r)
	}
	// A new outbox (another master) forgets the old one's entries.
	r.Follow(other)
	want("old master's grant", g(ob, 20, 0), "seg", Revoked)
	want("new master's grant", g(other, 0, 4096), "seg", 0)
	// Past max entries the oldest is dropped and older grants are void.
	r = NewRevocations(2)
	r.Follow(ob)
	r.Applied(100)
	for i := range uint64(3) {
		r.Revoke("seg", i*64, 10+i, until, now)
	}
	if n := r.Len(); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	want("before the dropped entry", g(ob, 9, 999), "seg", Revoked)
	want("after the dropped entry", g(ob, 10, 999), "seg", 0)
}

// FuzzRevocations drives a table with random operations beside a model
// that keeps every revocation: a grant the model says a live free voided
// is always refused; one no revocation could void, with its records
// applied, is always served.
func FuzzRevocations(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 0x10, 3, 0x22, 2, 0x30, 1, 0x41, 0, 0x03})
	f.Fuzz(func(t *testing.T, ops []byte) {
		type rev struct {
			seg        string
			off, seq   uint64
			until      int64
			outboxSeen uint64
		}
		r := NewRevocations(8)
		var outbox, applied, seq uint64
		var revs []rev
		now := int64(1000)
		segs := []string{"a", "b"}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%5, uint64(ops[i+1])
			switch op {
			case 0: // follow
				ob := arg%3 + 1
				if ob != outbox {
					revs = nil
					applied = 0
				}
				outbox = ob
				r.Follow(ob)
			case 1: // a free, applied
				seq++
				until := now + int64(arg%7)
				r.Revoke(segs[arg%2], arg%4*64, seq, until, now)
				revs = append(revs, rev{segs[arg%2], arg % 4 * 64, seq, until, outbox})
			case 2:
				applied = max(applied, seq)
				r.Applied(seq)
			case 3:
				now += int64(arg % 3)
			case 4: // check a grant
				g := &Grant{Outbox: outbox, Seq: arg % (seq + 1), Offset: arg % 4 * 64, Length: 64}
				seg := segs[arg/4%2]
				err := r.Check(g, seg, 0, nil)
				if outbox == 0 {
					if err != nil {
						t.Fatalf("no stream followed, refused: %v", err)
					}
					continue
				}
				voided, any := false, false
				for _, x := range revs {
					if x.seq > g.Seq {
						any = true
						if x.seg == seg && x.off == g.Offset && x.until > now {
							voided = true
						}
					}
				}
				if g.Seq > applied {
					voided = true // its records are not applied: refused after the wait
				}
				if voided && err == nil {
					t.Fatalf("grant %+v on %s served, model says void (now %d, %v)", g, seg, now, revs)
				}
				if !voided && !any && err != nil {
					t.Fatalf("grant %+v on %s refused, nothing could void it: %v", g, seg, err)
				}
			}
		}
	})
}

// BenchmarkVerifyRevocable: Verify alone (the code before revocation)
// beside VerifyGrant plus Check against a table of 100,000 revoked
// extents, in the same run.
//
//	go test -run '^$' -bench VerifyRevocable ./internal/grant/
func BenchmarkVerifyRevocable(b *testing.B) {
	k := NewKey(1)
	var ring Keyring
	ring.Set(k)
	now := time.Now()
	r := NewRevocations(0)
	r.Follow(7)
	for i := range uint64(100_000) {
		r.Revoke("box/mem0", (i+1)<<20, i+1, now.Add(time.Hour).UnixNano(), now.UnixNano())
	}
	r.Applied(200_000)
	tok := ring.Sign("box/mem0", 0, 0, 1<<20, Read, Session{}, now.Add(time.Hour), Mark{Outbox: 7, Seq: 150_000})
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := ring.Verify(tok, "box/mem0", 0, 0, 1<<20, Read, now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify+revocations", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			g, err := ring.VerifyGrant(tok, "box/mem0", 0, 0, 1<<20, Read, now)
			if err == nil {
				err = r.Check(&g, "box/mem0", time.Second, nil)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestRevocationsDrain: Drain waits for the frames that entered before it
// (their grant was checked before the revocation) and not for those that
// enter after, nor for a frame waiting in Check for the records the
// drain is ahead of (no deadlock between a new put's early write and the
// free it waits for).
func TestRevocationsDrain(t *testing.T) {
	r := NewRevocations(0)
	r.Follow(1)
	e := r.Enter()
	drained := make(chan bool, 1)
	go func() { drained <- r.Drain(5 * time.Second) }()
	time.Sleep(20 * time.Millisecond)
	late := r.Enter() // after the flip: not waited for
	select {
	case <-drained:
		t.Fatal("Drain returned with a frame of its epoch in flight")
	default:
	}
	r.Exit(e)
	if !<-drained {
		t.Fatal("Drain timed out after the frame exited")
	}
	r.Exit(late)
	if !r.Drain(time.Second) {
		t.Fatal("Drain with nothing in flight")
	}
	// A frame still running makes Drain give up after its timeout.
	stuck := r.Enter()
	if r.Drain(30 * time.Millisecond) {
		t.Fatal("Drain ignored a frame in flight")
	}
	r.Exit(stuck)
	// A frame waiting for records in Check has exited while it waits.
	held := r.Enter()
	done := make(chan error, 1)
	go func() { done <- r.Check(&Grant{Outbox: 1, Seq: 3, Length: 1}, "seg", 5*time.Second, &held) }()
	time.Sleep(20 * time.Millisecond)
	if !r.Drain(time.Second) {
		t.Fatal("Drain waited for a frame waiting in Check")
	}
	r.Applied(3)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.Exit(held)
	if !r.Drain(time.Second) {
		t.Fatal("the frame's hold was not returned")
	}
}

// recordingPublisher keeps what a Revocations told it, in order.
type recordingPublisher struct{ calls []string }

func (p *recordingPublisher) Followed(outbox uint64) {
	p.calls = append(p.calls, fmt.Sprintf("follow %d", outbox))
}
func (p *recordingPublisher) Revoked(seg string, off, seq uint64) {
	p.calls = append(p.calls, fmt.Sprintf("revoke %s %d %d", seg, off, seq))
}
func (p *recordingPublisher) Cleared() { p.calls = append(p.calls, "clear") }

// TestRevocationsPublish: a publisher learns every change as it is made
// (a free published even when every grant it voids has expired here),
// and Replay tells one segment's state.
func TestRevocationsPublish(t *testing.T) {
	r := NewRevocations(0)
	var p recordingPublisher
	r.Publish(&p)
	now := time.Now().UnixNano()
	r.Follow(5)
	r.Follow(5) // no change: not published
	r.Revoke("a", 64, 3, now+int64(time.Minute), now)
	r.Revoke("a", 128, 4, now-1, now) // expired here: kept nowhere, published
	r.Revoke("b", 0, 6, now+int64(time.Minute), now)
	r.Clear()
	want := []string{"follow 5", "revoke a 64 3", "revoke a 128 4", "revoke b 0 6", "clear"}
	if !slices.Equal(p.calls, want) {
		t.Fatalf("published %q, want %q", p.calls, want)
	}
	r.Revoke("a", 64, 7, now+int64(time.Minute), now)
	r.Revoke("b", 0, 8, now+int64(time.Minute), now)
	var q recordingPublisher
	r.Replay("a", &q)
	if want := []string{"follow 5", "revoke a 64 7"}; !slices.Equal(q.calls, want) {
		t.Fatalf("replayed %q, want %q", q.calls, want)
	}
	r.Publish(nil)
	r.Follow(6)
	if len(p.calls) != 7 {
		t.Fatalf("published after Publish(nil): %q", p.calls)
	}
}

// TestRevocationsVoids: Voids is Check's verdict without waiting: records
// not applied yet void nothing, another outbox voids, a later free of the
// extent and the floor void.
func TestRevocationsVoids(t *testing.T) {
	r := NewRevocations(1)
	g := func(outbox, seq, off uint64) *Grant { return &Grant{Outbox: outbox, Seq: seq, Offset: off, Length: 64} }
	if r.Voids(g(5, 3, 0), "a") {
		t.Fatal("a table following nothing voided a grant")
	}
	r.Follow(5)
	now := time.Now().UnixNano()
	r.Revoke("a", 64, 7, now+int64(time.Minute), now)
	for _, c := range []struct {
		what string
		g    *Grant
		seg  string
		want bool
	}{
		{"unplaced", g(0, 0, 64), "a", false},
		{"freed after it was signed", g(5, 6, 64), "a", true},
		{"signed after the free", g(5, 7, 64), "a", false},
		{"records not applied yet", g(5, 99, 128), "a", false},
		{"another segment", g(5, 6, 64), "b", false},
		{"another outbox", g(6, 6, 128), "a", true},
	} {
		if got := r.Voids(c.g, c.seg); got != c.want {
			t.Errorf("%s: voids %v, want %v", c.what, got, c.want)
		}
	}
	r.Revoke("a", 128, 9, now+int64(time.Minute), now) // past max: the free at 64 dropped, floor 7
	if !r.Voids(g(5, 6, 256), "a") {
		t.Fatal("a grant placed before the floor")
	}
}
