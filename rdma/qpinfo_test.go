package rdma

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/testnet"
	"github.com/kvtier/kvtier/kverr"
)

var sample = QPInfo{LID: 0x12, QPN: 0x00abcdef, PSN: 0x123456, MTU: 5, GIDValid: true,
	GID: [16]byte{0xfe, 0x80, 15: 1}}

func TestQPInfoRoundTrip(t *testing.T) {
	b, err := sample.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{'K', 'V', 'R', 'D', 1, 1, 0, 0x12, 0, 0xab, 0xcd, 0xef, 0, 0x12, 0x34, 0x56,
		0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoding\n got % x\nwant % x", b, want)
	}
	var q QPInfo
	if err := q.UnmarshalBinary(b); err != nil || q != sample {
		t.Fatalf("%+v %v", q, err)
	}
}

func TestQPInfoRejects(t *testing.T) {
	good, _ := sample.MarshalBinary()
	mut := map[string]func(b []byte) []byte{
		"short":    func(b []byte) []byte { return b[:39] },
		"magic":    func(b []byte) []byte { b[0] = 'X'; return b },
		"version":  func(b []byte) []byte { b[4] = 2; return b },
		"flags":    func(b []byte) []byte { b[5] = 3; return b },
		"qpn":      func(b []byte) []byte { b[8] = 1; return b },
		"psn":      func(b []byte) []byte { b[12] = 1; return b },
		"mtu0":     func(b []byte) []byte { b[32] = 0; return b },
		"mtu6":     func(b []byte) []byte { b[32] = 6; return b },
		"reserved": func(b []byte) []byte { b[39] = 1; return b },
		"gid-flag": func(b []byte) []byte { b[5] = 0; return b },
	}
	for name, m := range mut {
		var q QPInfo
		if err := q.UnmarshalBinary(m(bytes.Clone(good))); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("%s: got %v", name, err)
		}
		if q != (QPInfo{}) {
			t.Errorf("%s: decoded value changed on error", name)
		}
	}
	if _, err := (QPInfo{QPN: 1 << 24, MTU: 1}).MarshalBinary(); !kverr.Is(err, kverr.InvalidParams) {
		t.Errorf("encode of bad qpn: %v", err)
	}
}

// The side-channel handshake over real loopback TCP: both sides learn the
// other's QPInfo and run their "ready" step before the ready bytes.
func TestExchangeOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	other := QPInfo{LID: 7, QPN: 99, PSN: 5, MTU: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		peer  QPInfo
		ready QPInfo
		err   error
	}
	srv := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srv <- res{err: err}
			return
		}
		defer c.Close()
		var r res
		r.peer, r.err = exchange(ctx, c, other, func(p QPInfo) error { r.ready = p; return nil })
		srv <- r
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ready QPInfo
	peer, err := exchange(ctx, c, sample, func(p QPInfo) error { ready = p; return nil })
	if err != nil || peer != other || ready != other {
		t.Fatalf("client: %+v %+v %v", peer, ready, err)
	}
	r := <-srv
	if r.err != nil || r.peer != sample || r.ready != sample {
		t.Fatalf("server: %+v", r)
	}
}

// A peer that sends garbage, a failing ready step, and a silent peer with a
// deadline all end the handshake with an error, never a hang.
func TestExchangeFailures(t *testing.T) {
	ctx := context.Background()
	a, b := testnet.TCPPair(t)
	go b.Write(bytes.Repeat([]byte{0xee}, QPInfoSize))
	if _, err := exchange(ctx, a, sample, func(QPInfo) error { return nil }); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("garbage: %v", err)
	}
	a, b = testnet.TCPPair(t)
	go func() {
		x, _ := sample.MarshalBinary()
		b.Write(x)
	}()
	boom := errors.New("boom")
	if _, err := exchange(ctx, a, sample, func(QPInfo) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("ready failure: %v", err)
	}
	a, _ = testnet.TCPPair(t)
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := exchange(dctx, a, sample, func(QPInfo) error { return nil }); !kverr.Is(err, kverr.TransferFail) {
		t.Fatalf("silent peer: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{{GIDIndex: -1}, {QueueDepth: -1}, {QueueDepth: 1 << 20}} {
		if err := c.Validate(); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if d := (Config{}).withDefaults(); d.Port != 1 || d.QueueDepth != 128 {
		t.Fatalf("%+v", d)
	}
}

// FuzzQPInfo: decoding never panics, and whatever decodes re-encodes to the
// same bytes.
func FuzzQPInfo(f *testing.F) {
	b, _ := sample.MarshalBinary()
	f.Add(b)
	b2, _ := (QPInfo{QPN: 1, PSN: 2, MTU: 1}).MarshalBinary()
	f.Add(b2)
	f.Add(make([]byte, QPInfoSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		var q QPInfo
		if q.UnmarshalBinary(data) != nil {
			return
		}
		out, err := q.MarshalBinary()
		if err != nil || !bytes.Equal(out, data) {
			t.Fatalf("re-encode: % x vs % x (%v)", out, data, err)
		}
	})
}
