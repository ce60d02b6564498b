package fastrpc

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// cpuNow is this process's CPU time (user + system).
func cpuNow(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCall: unary calls over the fast path, client and server in this
// process, each call under its own timeout context as the client library
// makes them (rpcCtx). cpu-µs/call is the CPU of both sides per call,
// steadier than ns/op on a shared machine.
func BenchmarkCall(b *testing.B) {
	c := startCluster(b, true, "127.0.0.1:0")
	_, fast, _ := dialBoth(b, c.addr)
	req := &kvtierpb.KeyRequest{ClientId: "bench", Key: []byte("k")}
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"timeout", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 10*time.Second)
		}},
		{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			c0 := cpuNow(b)
			for b.Loop() {
				ctx, cancel := tc.ctx()
				if _, err := fast.Exist(ctx, req); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
			b.ReportMetric(float64(cpuNow(b)-c0)/float64(b.N)/1e3, "cpu-µs/call")
		})
	}
}
