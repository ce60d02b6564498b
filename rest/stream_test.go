package rest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
	"github.com/kvtier/kvtier/rest"
)

// memStreamer is a DataPlane whose objects live in a map, with faults the
// data path cannot be made to show on demand (a fake, named so): bytes that
// differ from the stored checksum, a range read that fails.
type memStreamer struct {
	objs    map[string][]byte
	crc     map[string]uint32
	corrupt int64 // flip the byte at this offset when read (-1: none)
	failAt  int64 // fail the range read covering this offset (-1: none)
	reads   atomic.Int64
}

func (m *memStreamer) Put(ctx context.Context, key string, value []byte, o rest.PutOptions) error {
	return errors.New("not used")
}

func (m *memStreamer) Get(ctx context.Context, tenant, key string) ([]byte, error) {
	return nil, errors.New("the streaming path must be used")
}

func (m *memStreamer) OpenObject(ctx context.Context, tenant, key string) (rest.ObjectStream, error) {
	v, ok := m.objs[key]
	if !ok {
		return nil, kverr.New(kverr.ObjectNotFound, key, "no such object")
	}
	return &memStream{m: m, v: v, crc: m.crc[key]}, nil
}

type memStream struct {
	m   *memStreamer
	v   []byte
	crc uint32
}

func (s *memStream) Size() uint64             { return uint64(len(s.v)) }
func (s *memStream) Checksum() (uint32, bool) { return s.crc, true }
func (s *memStream) ReadAt(ctx context.Context, p []byte, off uint64) error {
	s.m.reads.Add(1)
	end := int64(off) + int64(len(p))
	if s.m.failAt >= int64(off) && s.m.failAt < end {
		return kverr.New(kverr.TransferFail, "", "replica went away")
	}
	copy(p, s.v[off:])
	if s.m.corrupt >= int64(off) && s.m.corrupt < end {
		p[s.m.corrupt-int64(off)] ^= 0xff
	}
	return nil
}

func streamServer(t *testing.T, dp *memStreamer, cfg rest.Config) string {
	t.Helper()
	url, _ := streamServerClosed(t, dp, cfg)
	return url
}

// streamServerClosed also reports each connection the server closes.
func streamServerClosed(t *testing.T, dp *memStreamer, cfg rest.Config) (string, <-chan struct{}) {
	t.Helper()
	m, err := master.New(master.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rest.New(cfg, master.NewGRPCServer(m), dp)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{}, 16)
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	return hs.URL, closed
}

func newStreamer(size int) (*memStreamer, []byte) {
	v := make([]byte, size)
	for i := range v {
		v[i] = byte(i*7 + i>>11)
	}
	return &memStreamer{objs: map[string][]byte{"k": v}, crc: map[string]uint32{"k": crc32c.Checksum(v)}, corrupt: -1, failAt: -1}, v
}

func TestStreamedObjectData(t *testing.T) {
	const size = 3*rest.StreamChunk + 12345
	t.Run("whole", func(t *testing.T) {
		dp, v := newStreamer(size)
		url := streamServer(t, dp, rest.Config{})
		res, err := http.Get(url + "/api/v1/objects/k/data")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		got, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != 200 || !bytes.Equal(got, v) {
			t.Fatalf("status %d, %d bytes, %v", res.StatusCode, len(got), err)
		}
		if res.ContentLength != size || res.Header.Get("X-Kvtier-Crc32c") != strconv.FormatUint(uint64(dp.crc["k"]), 10) {
			t.Fatalf("headers %v", res.Header)
		}
		if n := dp.reads.Load(); n != 4 {
			t.Fatalf("%d range reads, want 4 chunks", n)
		}
	})
	// A wrong byte anywhere: the body is cut short, never complete.
	for _, at := range []int64{10, size - 5} {
		t.Run("corrupt at "+strconv.FormatInt(at, 10), func(t *testing.T) {
			dp, _ := newStreamer(size)
			dp.corrupt = at
			url := streamServer(t, dp, rest.Config{})
			res, err := http.Get(url + "/api/v1/objects/k/data")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			got, err := io.ReadAll(res.Body)
			if err == nil || len(got) >= size {
				t.Fatalf("a checksum mismatch ended cleanly: %d bytes, %v", len(got), err)
			}
		})
	}
	t.Run("read fails mid-stream", func(t *testing.T) {
		dp, _ := newStreamer(size)
		dp.failAt = 2*rest.StreamChunk + 1
		url := streamServer(t, dp, rest.Config{})
		res, err := http.Get(url + "/api/v1/objects/k/data")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		got, err := io.ReadAll(res.Body)
		if err == nil || len(got) != 2*rest.StreamChunk {
			t.Fatalf("got %d bytes, %v; want 2 chunks and an error", len(got), err)
		}
	})
	t.Run("read fails before the first byte", func(t *testing.T) {
		dp, _ := newStreamer(size)
		dp.failAt = 0
		url := streamServer(t, dp, rest.Config{})
		res, err := http.Get(url + "/api/v1/objects/k/data")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == 200 || !strings.Contains(string(body), "TRANSFER_FAIL") {
			t.Fatalf("status %d body %s", res.StatusCode, body)
		}
		res, err = http.Get(url + "/api/v1/objects/absent/data")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 404 {
			t.Fatalf("absent: %d", res.StatusCode)
		}
	})
	// A reader that stops reading is cut off after DataWriteTimeout; the
	// server stops reading chunks for it.
	t.Run("stalled reader", func(t *testing.T) {
		dp, _ := newStreamer(64 * rest.StreamChunk)
		url, closed := streamServerClosed(t, dp, rest.Config{DataWriteTimeout: 200 * time.Millisecond})
		host := strings.TrimPrefix(url, "http://")
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		if _, err := io.WriteString(c, "GET /api/v1/objects/k/data HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		n := dp.reads.Load()
		time.Sleep(500 * time.Millisecond)
		if dp.reads.Load() != n || n >= 64 {
			t.Fatalf("the server kept reading for a stalled client: %d then %d chunks", n, dp.reads.Load())
		}
		// The server closed its connection.
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the server did not close the stalled connection")
		}
	})
}

// wholeOnly hides the streaming capability: GET .../data then reads the
// object whole (the path before streaming), the baseline of the benchmark.
type wholeOnly struct{ m *memStreamer }

func (w wholeOnly) Put(ctx context.Context, key string, value []byte, o rest.PutOptions) error {
	return errors.New("not used")
}

func (w wholeOnly) Get(ctx context.Context, tenant, key string) ([]byte, error) {
	v, ok := w.m.objs[key]
	if !ok {
		return nil, kverr.New(kverr.ObjectNotFound, key, "no such object")
	}
	return bytes.Clone(v), nil // a data plane hands out a fresh buffer per Get
}

// BenchmarkObjectData: a 64 MiB object over loopback HTTP, streamed in
// 1 MiB chunks (CRC32C computed on the way) against read whole and sent in
// one write, alternating in one run. ratio = streamed / whole throughput.
func BenchmarkObjectData(b *testing.B) {
	dp, _ := newStreamer(64 << 20)
	serve := func(d rest.DataPlane) string {
		m, err := master.New(master.Config{})
		if err != nil {
			b.Fatal(err)
		}
		srv, err := rest.New(rest.Config{}, master.NewGRPCServer(m), d)
		if err != nil {
			b.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler())
		b.Cleanup(hs.Close)
		return hs.URL + "/api/v1/objects/k/data"
	}
	streamed, whole := serve(dp), serve(wholeOnly{dp})
	get := func(url string) time.Duration {
		t0 := time.Now()
		res, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err != nil || n != 64<<20 {
			b.Fatalf("%d bytes, %v", n, err)
		}
		return time.Since(t0)
	}
	get(streamed)
	get(whole)
	b.SetBytes(64 << 20)
	b.ResetTimer()
	var ts, tw time.Duration
	for i := range b.N {
		if i%2 == 0 {
			ts += get(streamed)
			tw += get(whole)
		} else {
			tw += get(whole)
			ts += get(streamed)
		}
	}
	b.ReportMetric(float64(b.N)*64/ts.Seconds()/1024, "streamed-GiB/s")
	b.ReportMetric(float64(b.N)*64/tw.Seconds()/1024, "whole-GiB/s")
	b.ReportMetric(tw.Seconds()/ts.Seconds(), "ratio")
}
