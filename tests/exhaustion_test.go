package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
	"github.com/kvtier/kvtier/rest"
)

// An appliance limited to 1,024 descriptors, its data port flooded with
// connections: while it is out of descriptors it reports itself unhealthy
// (the master's /ready is degraded naming the listener); once the flood
// ends, new connections are served again (the accept loop backed off, it
// did not end).
func TestDataPortSurvivesDescriptorExhaustion(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skipf("prlimit not installed (%v)", err)
	}
	c := startDefaultCluster(t)
	a := c.appliance("box-a", "--dram", "64MiB", "--shm=false") // every read on the data port
	data := a.addrs["data"]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v := randomBytes(5, 1<<20)
	func() {
		cl := c.client(t)
		if err := cl.Put(ctx, "flood/k", v); err != nil {
			t.Fatal(err)
		}
	}()
	pid := strconv.Itoa(a.cmd.Process.Pid)
	if out, err := exec.Command("prlimit", "--pid", pid, "--nofile=1024:1024").CombinedOutput(); err != nil {
		t.Skipf("prlimit refused (%v: %s)", err, out)
	}
	var flood []net.Conn
	defer func() {
		for _, fc := range flood {
			fc.Close()
		}
	}()
	for range 1500 {
		fc, err := net.DialTimeout("tcp", data, 2*time.Second)
		if err != nil {
			break // the backlog is full too
		}
		flood = append(flood, fc)
	}
	t.Logf("%d flood connections open", len(flood))
	var r rest.ReadyJSON
	eventually(t, 10*time.Second, "the appliance reports its data listener failing", func() bool {
		r, _ = c.ready(t)
		return r.Degraded && len(r.Reasons) == 1 && strings.Contains(r.Reasons[0], "box-a") && strings.Contains(r.Reasons[0], "accept failing")
	})
	t.Logf("while flooded: %q", r.Reasons)
	for _, fc := range flood {
		fc.Close()
	}
	flood = nil
	eventually(t, 15*time.Second, "healthy again after the flood", func() bool {
		r, _ = c.ready(t)
		return r.Ready && !r.Degraded
	})
	// A new client, so new connections to the data port.
	fresh, err := client.New(ctx, client.Config{MasterAddr: c.grpc, OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	got, err := fresh.Get(ctx, "flood/k")
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get through the data port after the flood: %v", err)
	}
	if st := fresh.Engine().Stats(); st.TCPRequests == 0 {
		t.Fatalf("the read did not use the data port: %+v", st)
	}
}

// rssBytes reads a process's resident set size.
func rssBytes(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			return n << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// Twenty REST readers of a 64 MiB object that stop reading: the master
// (which serves REST) holds a chunk per request, not the object: its RSS
// grows by less than 64 MiB, where holding the object per request took
// 1.16 GB. A reader that does read gets every byte, checked against the
// object's CRC32C.
func TestStalledRESTReadersStayBounded(t *testing.T) {
	c := startDefaultCluster(t)
	c.appliance("box-a", "--dram", "256MiB")
	cl := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v := randomBytes(64, 64<<20)
	if err := cl.Put(ctx, "big/obj", v); err != nil {
		t.Fatal(err)
	}
	url := "http://" + c.http + "/api/v1/objects/" + rest.EncodeKeyPath([]byte("big/obj")) + "/data"
	// One full read: byte-exact, and it warms the master's REST client up.
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, res.Body)
	res.Body.Close()
	if err != nil || n != int64(len(v)) || !bytes.Equal(h.Sum(nil), func() []byte { s := sha256.Sum256(v); return s[:] }()) {
		t.Fatalf("full REST read: %d bytes, %v", n, err)
	}
	if res.Header.Get("X-Kvtier-Crc32c") != strconv.FormatUint(uint64(client.Checksum(v)), 10) {
		t.Fatalf("checksum header %q", res.Header.Get("X-Kvtier-Crc32c"))
	}
	pid := c.master.cmd.Process.Pid
	time.Sleep(500 * time.Millisecond)
	before := rssBytes(t, pid)

	var stalled []net.Conn
	defer func() {
		for _, s := range stalled {
			s.Close()
		}
	}()
	host := c.http
	path := strings.TrimPrefix(url, "http://"+host)
	for range 20 {
		s, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		// A small receive buffer, never read: the server's writes block.
		_ = s.(*net.TCPConn).SetReadBuffer(4 << 10)
		fmt.Fprintf(s, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host)
		stalled = append(stalled, s)
	}
	// Let every request reach its blocked write; read one status line to
	// know the server started answering.
	st, err := bufio.NewReader(stalled[0]).ReadString('\n')
	if err != nil || !strings.Contains(st, "200") {
		t.Fatalf("stalled reader's status %q: %v", st, err)
	}
	var peak uint64
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		peak = max(peak, rssBytes(t, pid))
	}
	grew := int64(peak) - int64(before)
	t.Logf("master RSS %d MiB before, %d MiB peak with 20 stalled readers of a 64 MiB object (+%d MiB)", before>>20, peak>>20, grew>>20)
	if grew >= 64<<20 {
		t.Fatalf("RSS grew by %d MiB with 20 stalled readers: the object is held per request", grew>>20)
	}
}

// ObjectReader reads an object in 1 MiB ranges from whichever replica the
// master lists: DRAM, and the SSD tier once DRAM is gone (ranged reads of
// a bucket extent); the CRC32C over the ranges is the object's.
func TestObjectReaderRangesFromDRAMAndSSD(t *testing.T) {
	ip := startInproc(t, master.Config{})
	a := ip.appliance(t, appliance.Config{Name: "box-r", SSDDir: t.TempDir()})
	c := ip.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := randomBytes(77, 5<<20+123)
	if err := c.Put(ctx, "ranged", v); err != nil {
		t.Fatal(err)
	}
	readAll := func(what string) {
		t.Helper()
		r, err := c.OpenReader(ctx, "ranged")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 0, len(v))
		buf := make([]byte, 1<<20)
		var crc uint32
		for off := uint64(0); off < r.Size(); off += uint64(len(buf)) {
			n := min(uint64(len(buf)), r.Size()-off)
			if err := r.ReadAt(ctx, buf[:n], off); err != nil {
				t.Fatalf("%s: range at %d: %v", what, off, err)
			}
			crc = crc32c.Update(crc, buf[:n])
			got = append(got, buf[:n]...)
		}
		want, ok := r.Checksum()
		if !bytes.Equal(got, v) || !ok || crc != want {
			t.Fatalf("%s: ranges differ from the object (crc %08x, want %08x)", what, crc, want)
		}
		if err := r.ReadAt(ctx, buf[:10], 100); !kverr.Is(err, kverr.InvalidParams) {
			t.Fatalf("%s: an unaligned range: %v", what, err)
		}
	}
	readAll("from DRAM")
	eventually(t, 10*time.Second, "the object offloaded to SSD", func() bool {
		info, err := c.Stat(ctx, "ranged")
		if err != nil {
			return false
		}
		for _, r := range info.Replicas {
			if r.Type == kvtierpb.ReplicaType_LOCAL_DISK && r.State == kvtierpb.ReplicaState_COMPLETE {
				return true
			}
		}
		return false
	})
	for _, s := range a.Segments() {
		if err := ip.m.UnmountSegment(ctx, "", s, 0); err != nil {
			t.Fatal(err)
		}
	}
	info, err := c.Stat(ctx, "ranged")
	if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Type != kvtierpb.ReplicaType_LOCAL_DISK {
		t.Fatalf("after dropping DRAM: %v %v", info, err)
	}
	readAll("from SSD")
}
