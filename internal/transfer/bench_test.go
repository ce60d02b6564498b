package transfer

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

var benchSizes = []int{64 << 10, 1 << 20, 16 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// rawClient is the baseline: plain Go TCP moving the same bytes to/from the
// helper process's raw server (see serveRaw).
type rawClient struct {
	c   net.Conn
	cmd [9]byte
}

func (r *rawClient) do(op byte, buf []byte) error {
	r.cmd[0] = op
	binary.BigEndian.PutUint64(r.cmd[1:], uint64(len(buf)))
	if op == 'R' {
		if _, err := r.c.Write(r.cmd[:]); err != nil {
			return err
		}
		_, err := io.ReadFull(r.c, buf)
		return err
	}
	bufs := net.Buffers{r.cmd[:], buf}
	if _, err := bufs.WriteTo(r.c); err != nil {
		return err
	}
	_, err := io.ReadFull(r.c, r.cmd[:1])
	return err
}

// BenchmarkTCP moves READs and WRITEs between this process and a re-exec'd
// server process, beside plain Go TCP moving the same bytes; ratio =
// engine throughput / raw throughput.
func BenchmarkTCP(b *testing.B) { benchPeer(b, false) }

// BenchmarkShared is BenchmarkTCP with the server process sharing its
// segment's memory: the engine copies through the mapping, the baseline
// still moves the bytes over TCP between the two processes.
func BenchmarkShared(b *testing.B) { benchPeer(b, true) }

func benchPeer(b *testing.B, shared bool) {
	spec := fmt.Sprint(16 << 20)
	if shared {
		spec = "shm:" + spec
	}
	h := startHelperSpec(b, spec)
	cli := newEngine(b, Config{})
	if shared {
		buf := make([]byte, 4096)
		deadline := time.Now().Add(5 * time.Second)
		for cli.Stats().SharedRequests == 0 {
			if time.Now().After(deadline) {
				b.Fatalf("never mapped the helper's memory: %+v", cli.Stats())
			}
			if err := cli.Do(context.Background(), []Request{{Op: Read, Endpoint: h.addr, Segment: helperSegment, Buf: buf}})[0]; err != nil {
				b.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	tcp0 := cli.Stats().TCPRequests // the warm-up's, before the mapping
	nc, err := net.Dial("tcp", h.rawAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	raw := &rawClient{c: nc}
	for _, op := range []Op{Read, Write} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%s", op, sizeName(n)), func(b *testing.B) {
				buf := make([]byte, n)
				req := []Request{{Op: op, Endpoint: h.addr, Segment: helperSegment, Buf: buf}}
				rop := byte('R')
				if op == Write {
					rop = 'W'
				}
				// Warm up both paths (connections, page faults).
				for range 3 {
					if err := cli.Do(context.Background(), req)[0]; err != nil {
						b.Fatal(err)
					}
					if err := raw.do(rop, buf); err != nil {
						b.Fatal(err)
					}
				}
				// Interleave engine and raw operations so both see the same
				// machine load; time each separately.
				b.SetBytes(int64(n))
				b.ResetTimer()
				var eng, rawT time.Duration
				for i := range b.N {
					// Alternate which goes first so neither always finds
					// the caches (or the socket buffers) warm.
					var d [2]time.Duration
					for k := range 2 {
						t0 := time.Now()
						if (i+k)%2 == 0 {
							if err := cli.Do(context.Background(), req)[0]; err != nil {
								b.Fatal(err)
							}
							d[0] = time.Since(t0)
						} else {
							if err := raw.do(rop, buf); err != nil {
								b.Fatal(err)
							}
							d[1] = time.Since(t0)
						}
					}
					eng += d[0]
					rawT += d[1]
				}
				b.StopTimer()
				if st := cli.Stats(); shared != (st.SharedRequests > 0) || (shared && st.TCPRequests != tcp0) {
					b.Fatalf("wrong path (shared=%v): %+v", shared, st)
				}
				total := float64(n) * float64(b.N)
				b.ReportMetric(total/eng.Seconds()/1e9, "GB/s")
				b.ReportMetric(total/rawT.Seconds()/1e9, "raw-GB/s")
				b.ReportMetric(rawT.Seconds()/eng.Seconds(), "ratio")
			})
		}
	}
}

// BenchmarkLocal is the same-process path beside copy().
func BenchmarkLocal(b *testing.B) {
	e := newEngine(b, Config{})
	seg := make([]byte, 16<<20)
	fillPattern(seg, 0)
	if err := e.RegisterSegment("local", seg); err != nil {
		b.Fatal(err)
	}
	for _, op := range []Op{Read, Write} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%s", op, sizeName(n)), func(b *testing.B) {
				buf := make([]byte, n)
				fillPattern(buf, 1)
				req := []Request{{Op: op, Segment: "local", Buf: buf}}
				if err := e.Do(context.Background(), req)[0]; err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(n))
				b.ResetTimer()
				var eng, cp time.Duration
				for i := range b.N {
					var d [2]time.Duration
					for k := range 2 {
						t0 := time.Now()
						if (i+k)%2 == 0 {
							if err := e.Do(context.Background(), req)[0]; err != nil {
								b.Fatal(err)
							}
							d[0] = time.Since(t0)
						} else {
							if op == Read {
								copy(buf, seg[:n])
							} else {
								copy(seg[:n], buf)
							}
							d[1] = time.Since(t0)
						}
					}
					eng += d[0]
					cp += d[1]
				}
				b.StopTimer()
				total := float64(n) * float64(b.N)
				b.ReportMetric(total/eng.Seconds()/1e9, "GB/s")
				b.ReportMetric(total/cp.Seconds()/1e9, "copy-GB/s")
				b.ReportMetric(cp.Seconds()/eng.Seconds(), "ratio")
			})
		}
	}
}

// BenchmarkTCPBatch: one Submit of `batch` requests of `size` bytes each
// (batch frames) from each of c callers, interleaved with the same callers
// moving the same messages over raw Go TCP (one connection each) to the
// same server process, and with the engine sending every request in a
// frame of its own (perkey). ratio = engine / raw; x-perkey = engine /
// per-key frames.
//
//	go test -run '^$' -bench BenchmarkTCPBatch -benchtime 300x ./internal/transfer/
func BenchmarkTCPBatch(b *testing.B) {
	h := startHelperSpec(b, fmt.Sprint(16<<20))
	cli := newEngine(b, Config{})
	per := newEngine(b, Config{DisableBatchFrames: true})
	for _, op := range []Op{Write, Read} {
		for _, sz := range []struct{ size, batch int }{{4 << 10, 128}, {16 << 10, 64}, {64 << 10, 16}} {
			for _, conc := range []int{1, 4} {
				b.Run(fmt.Sprintf("%s/%s/b%d/c%d", op, sizeName(sz.size), sz.batch, conc), func(b *testing.B) {
					raws := make([]*rawClient, conc)
					reqs := make([][]Request, conc)
					for g := range conc {
						nc, err := net.Dial("tcp", h.rawAddr)
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { nc.Close() })
						raws[g] = &rawClient{c: nc}
						reqs[g] = make([]Request, sz.batch)
						for i := range reqs[g] {
							off := uint64((g*sz.batch + i) * sz.size % (16<<20 - sz.size))
							reqs[g][i] = Request{Op: op, Endpoint: h.addr, Segment: helperSegment, Offset: off, Buf: make([]byte, sz.size)}
						}
					}
					rop := byte('R')
					if op == Write {
						rop = 'W'
					}
					run := func(which int) (time.Duration, error) {
						t0 := time.Now()
						errc := make(chan error, conc)
						for g := range conc {
							go func() {
								var err error
								switch which {
								case 0, 1:
									e := cli
									if which == 1 {
										e = per
									}
									for _, x := range e.Do(context.Background(), reqs[g]) {
										if x != nil && err == nil {
											err = x
										}
									}
								default:
									for i := range sz.batch {
										if err = raws[g].do(rop, reqs[g][i].Buf); err != nil {
											break
										}
									}
								}
								errc <- err
							}()
						}
						var first error
						for range conc {
							if err := <-errc; err != nil && first == nil {
								first = err
							}
						}
						return time.Since(t0), first
					}
					for w := range 3 { // warm up connections
						if _, err := run(w); err != nil {
							b.Fatal(err)
						}
					}
					b.SetBytes(int64(sz.size * sz.batch * conc))
					b.ResetTimer()
					var d [3]time.Duration
					for i := range b.N {
						for k := range 3 {
							which := (i + k) % 3
							t, err := run(which)
							if err != nil {
								b.Fatal(err)
							}
							d[which] += t
						}
					}
					b.StopTimer()
					total := float64(sz.size*sz.batch*conc) * float64(b.N)
					b.ReportMetric(total/d[0].Seconds()/1e9, "GB/s")
					b.ReportMetric(total/d[1].Seconds()/1e9, "perkey-GB/s")
					b.ReportMetric(total/d[2].Seconds()/1e9, "raw-GB/s")
					b.ReportMetric(d[2].Seconds()/d[0].Seconds(), "ratio")
					b.ReportMetric(d[1].Seconds()/d[0].Seconds(), "x-perkey")
				})
			}
		}
	}
}
