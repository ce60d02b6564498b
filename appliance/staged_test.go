package appliance

import (
	"context"
	"testing"
	"time"
)

// TestStaging: a staged put is found only by its own token, stays listed
// (an offload of its key waits) until its record's application finishes
// it, cannot be discarded or kept from under that application, and kept
// bytes are a copy, dropped when another master's records are followed.
func TestStaging(t *testing.T) {
	var s staging
	buf := []byte("staged bytes")
	sp, ok := s.add("", "k", buf)
	if !ok {
		t.Fatal("first stage of k refused")
	}
	if _, ok := s.add("default", "k", buf); ok {
		t.Fatal(`a second put of k staged ("" is the default tenant)`)
	}
	if s.take("default", []byte("k"), sp.token+1) != nil || s.take("other", []byte("k"), sp.token) != nil {
		t.Fatal("a record of another token or tenant took the put")
	}
	if s.take("default", []byte("k"), sp.token) != sp {
		t.Fatal("its own record did not take it")
	}
	if s.take("default", []byte("k"), sp.token) != nil {
		t.Fatal("taken twice")
	}
	waited := make(chan struct{})
	go func() {
		s.awaitKey(context.Background(), "default", []byte("k"), time.Minute)
		close(waited)
	}()
	discarded := make(chan struct{})
	go func() { s.discard("", "k", sp); close(discarded) }()
	select {
	case <-waited:
		t.Fatal("an offload of the key did not wait for the copy")
	case <-discarded:
		t.Fatal("discard returned while a record copies from the bytes")
	case <-time.After(50 * time.Millisecond):
	}
	s.finish("default", []byte("k"), sp, true)
	<-waited
	<-discarded
	if !sp.ok || s.copied != 1 {
		t.Fatalf("finished: ok %v, copied %d", sp.ok, s.copied)
	}
	// Kept: the bytes are the box's copy; another master drops them.
	sp2, _ := s.add("", "k2", buf)
	s.keep("", "k2", sp2)
	if &sp2.bytes[0] == &buf[0] || string(sp2.bytes) != string(buf) || s.keptN != uint64(len(buf)) {
		t.Fatalf("kept bytes not a copy (kept %d)", s.keptN)
	}
	s.forgetKept()
	select {
	case <-sp2.landed:
	default:
		t.Fatal("forgetKept left the kept put waiting")
	}
	if sp2.ok || s.keptN != 0 || s.take("default", []byte("k2"), sp2.token) != nil {
		t.Fatal("a forgotten put still listed")
	}
	// Discarded before any record: gone at once, the key free again.
	sp3, _ := s.add("", "k3", buf)
	s.discard("", "k3", sp3)
	if _, ok := s.add("", "k3", buf); !ok {
		t.Fatal("k3 still staged after its discard")
	}
}
