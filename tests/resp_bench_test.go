package tests

import (
	"encoding/csv"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkRESP runs redis-benchmark against kvtier's Redis front end
// (`kvtier standalone --resp-addr`, offload off) and against redis-server
// started with the same flags in the same run (no persistence), round by
// round in turn, and reports each server's requests per second (median of
// the rounds) and their ratio:
//
//	go test -run '^$' -bench RESP -benchtime 1x ./tests/
//
// KVTIER_RESP_ROUNDS sets the rounds (default 3).
func BenchmarkRESP(b *testing.B) {
	for _, tool := range []string{"redis-benchmark", "redis-server", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("%s not installed (apt-get install redis-tools redis-server): %v", tool, err)
		}
	}
	kv := startProcB(b, "standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--resp-addr", "127.0.0.1:0",
		"--name", "bench-box", "--dram", "256MiB", "--ssd-dir", "", "--offload", "off", "--cpuprofile", os.Getenv("KVTIER_BENCH_PROFILE"))
	redis := startRedisServer(b)
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("KVTIER_RESP_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for _, size := range []int{4 << 10, 1 << 20} {
		for _, clients := range []int{1, 4, 50} {
			n := 20000
			if size >= 1<<20 {
				n = 1000
			}
			name := fmt.Sprintf("%dKiB/c%d", size>>10, clients)
			b.Run(name, func(b *testing.B) {
				res := map[string][]float64{}
				for range rounds {
					for _, srv := range []struct{ name, addr string }{{"kvtier", kv["resp"]}, {"redis", redis}} {
						for op, rps := range runRedisBenchmark(b, srv.addr, size, clients, n) {
							res[op+"_"+srv.name] = append(res[op+"_"+srv.name], rps)
						}
					}
				}
				for _, op := range []string{"SET", "GET"} {
					k, r := median(res[op+"_kvtier"]), median(res[op+"_redis"])
					b.ReportMetric(k, strings.ToLower(op)+"_kvtier_rps")
					b.ReportMetric(r, strings.ToLower(op)+"_redis_rps")
					b.ReportMetric(k/r, strings.ToLower(op)+"_x_redis")
					b.Logf("%s %s: kvtier %v, redis-server %v req/s", op, name, res[op+"_kvtier"], res[op+"_redis"])
				}
			})
		}
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// runRedisBenchmark runs `redis-benchmark -t set,get -d size -c clients -n n`
// against addr and returns requests per second by test name.
func runRedisBenchmark(b *testing.B, addr string, size, clients, n int) map[string]float64 {
	b.Helper()
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command("redis-benchmark", "-h", host, "-p", port, "-t", "set,get", "-d", strconv.Itoa(size),
		"-c", strconv.Itoa(clients), "-n", strconv.Itoa(n), "--csv").Output()
	if err != nil {
		b.Fatalf("redis-benchmark against %s: %v\n%s", addr, err, out)
	}
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		b.Fatalf("redis-benchmark --csv output: %v\n%s", err, out)
	}
	got := map[string]float64{}
	for _, r := range recs[1:] { // "test","rps",...
		if v, err := strconv.ParseFloat(r[1], 64); err == nil {
			got[r[0]] = v
		}
	}
	if got["SET"] == 0 || got["GET"] == 0 {
		b.Fatalf("redis-benchmark against %s: no SET/GET figures:\n%s", addr, out)
	}
	return got
}

// startRedisServer runs redis-server on a free loopback port without
// persistence and returns its address.
func startRedisServer(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stopGracefully(cmd) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if out, err := exec.Command("redis-cli", "-p", port, "PING").Output(); err == nil && strings.TrimSpace(string(out)) == "PONG" {
			return addr
		}
		if time.Now().After(deadline) {
			b.Fatalf("redis-server on %s did not answer PING", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
