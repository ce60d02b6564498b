package spdk_test

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/spdk"
	"github.com/kvtier/kvtier/nof/spdk/spdktest"
)

// BenchmarkCall measures one spdk_get_version round trip through the Client
// against the same server, beside a baseline that writes the recorded request
// bytes on a raw Unix socket and reads up to the reply's "\n". The metric
// client/raw is the client's overhead factor (framing, id routing, decode).
func BenchmarkCall(b *testing.B) {
	s := replayServerB(b)
	req, err := spdktest.Recording("01-spdk_get_version")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()

	raw, err := net.Dial("unix", s.Path())
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	br := bufio.NewReader(raw)
	c, err := spdk.New(spdk.Config{Socket: s.Path()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for range 200 { // warm both paths up
		if _, err := c.SpdkGetVersion(ctx); err != nil {
			b.Fatal(err)
		}
		raw.Write(req.Request)
		if _, err := br.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}

	n := b.N
	start := time.Now()
	for range n {
		if _, err := raw.Write(req.Request); err != nil {
			b.Fatal(err)
		}
		if _, err := br.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}
	rawNs := float64(time.Since(start).Nanoseconds()) / float64(n)

	b.ResetTimer()
	start = time.Now()
	for range n {
		if _, err := c.SpdkGetVersion(ctx); err != nil {
			b.Fatal(err)
		}
	}
	clientNs := float64(time.Since(start).Nanoseconds()) / float64(n)
	b.ReportMetric(rawNs, "raw-ns/call")
	b.ReportMetric(clientNs, "client-ns/call")
	b.ReportMetric(clientNs/rawNs, "client/raw")
}

func replayServerB(b *testing.B) *spdktest.Server {
	ex, err := spdktest.Recordings()
	if err != nil {
		b.Fatal(err)
	}
	rp, err := spdktest.NewReplay(ex)
	if err != nil {
		b.Fatal(err)
	}
	s, err := spdktest.Listen(b.TempDir()+"/spdk.sock", rp.Handle, spdktest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}
