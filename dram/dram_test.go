package dram

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const helperEnv = "KVTIER_DRAM_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "nolock" {
		os.Exit(noLockHelper())
	}
	os.Exit(m.Run())
}

// noLockHelper runs in a child process: it lowers RLIMIT_MEMLOCK, drops
// CAP_IPC_LOCK from this thread's effective set, maps a region and prints
// what Map reported.
func noLockHelper() int {
	runtime.LockOSThread()
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 64 << 10, Max: 64 << 10}); err != nil {
		fmt.Println("setrlimit:", err)
		return 2
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		fmt.Println("capget:", err)
		return 2
	}
	data[0].Effective &^= 1 << unix.CAP_IPC_LOCK
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		fmt.Println("capset:", err)
		return 2
	}
	var mem Memory
	r, err := mem.Map(4<<20, HugepageOff)
	if err != nil {
		fmt.Println("map:", err)
		return 2
	}
	// The region must still work.
	b := r.Bytes()
	b[0], b[len(b)-1] = 1, 2
	if err := r.Prefault(context.Background()); err != nil {
		fmt.Println("prefault:", err)
		return 2
	}
	out, _ := json.Marshal(map[string]any{"locked": r.Locked(), "warnings": r.Warnings(), "lockedBytes": mem.Stats().LockedBytes, "ok": b[0] == 1 && b[len(b)-1] == 2})
	fmt.Println(string(out))
	return 0
}

func TestParseHugepageMode(t *testing.T) {
	for s, want := range map[string]HugepageMode{"auto": HugepageAuto, "on": HugepageOn, "OFF": HugepageOff, " on ": HugepageOn} {
		got, err := ParseHugepageMode(s)
		if err != nil || got != want {
			t.Errorf("ParseHugepageMode(%q) = %v, %v; want %v", s, got, err, want)
		}
		if g2, _ := ParseHugepageMode(got.String()); g2 != got {
			t.Errorf("String round trip of %v gave %v", got, g2)
		}
	}
	if _, err := ParseHugepageMode("yes"); err == nil || !strings.Contains(err.Error(), "auto|on|off") {
		t.Errorf("ParseHugepageMode(yes) err = %v", err)
	}
}

func TestParseHugepagesFree(t *testing.T) {
	n, err := parseHugepagesFree(strings.NewReader("MemTotal: 1 kB\nHugePages_Total:      10\nHugePages_Free:       7\n"))
	if err != nil || n != 7 {
		t.Fatalf("got %d, %v", n, err)
	}
	if _, err := parseHugepagesFree(strings.NewReader("MemTotal: 1 kB\n")); err == nil {
		t.Fatal("missing line accepted")
	}
	if _, err := parseHugepagesFree(strings.NewReader("HugePages_Free: x\n")); err == nil {
		t.Fatal("garbage accepted")
	}
}

func checkRW(t *testing.T, r *Region) {
	t.Helper()
	b := r.Bytes()
	if uint64(len(b)) != r.Size() {
		t.Fatalf("len(Bytes)=%d, Size=%d", len(b), r.Size())
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = byte(i >> 12)
	}
	b[len(b)-1] = 0xAB
	if err := r.Prefault(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(b); i += 4096 {
		if b[i] != byte(i>>12) {
			t.Fatalf("Prefault changed byte %d", i)
		}
	}
	if b[len(b)-1] != 0xAB {
		t.Fatal("Prefault changed last byte")
	}
}

func TestMapOffAndAuto(t *testing.T) {
	var mem Memory
	off, err := mem.Map(3<<20+5, HugepageOff)
	if err != nil {
		t.Fatal(err)
	}
	if off.Kind() != KindNormal {
		t.Errorf("off: kind %q", off.Kind())
	}
	checkRW(t, off)

	// Pretend no hugepages are reserved so auto must pick THP.
	mem.meminfo = "HugePages_Free: 0\n"
	auto, err := mem.Map(5<<20, HugepageAuto)
	if err != nil {
		t.Fatal(err)
	}
	if auto.Kind() != KindTHP {
		t.Errorf("auto without hugepages: kind %q, want thp (warnings %v)", auto.Kind(), auto.Warnings())
	}
	if auto.MappedSize()%HugePageSize != 0 {
		t.Errorf("thp mapping %d not rounded to 2 MiB", auto.MappedSize())
	}
	checkRW(t, auto)

	st := mem.Stats()
	if st.Regions != 2 || st.MappedBytes != off.MappedSize()+auto.MappedSize() || st.THP != auto.MappedSize() || st.Normal != off.MappedSize() {
		t.Errorf("stats %+v", st)
	}
	if os.Geteuid() == 0 && (!off.Locked() || st.LockedBytes != st.MappedBytes) {
		t.Errorf("root could not lock: %v %+v", off.Warnings(), st)
	}
	if err := off.Close(); err != nil {
		t.Fatal(err)
	}
	if err := auto.Close(); err != nil {
		t.Fatal(err)
	}
	if st := mem.Stats(); st != (Stats{}) {
		t.Errorf("stats after close %+v", st)
	}
}

func TestMapOnWithoutHugepages(t *testing.T) {
	mem := Memory{meminfo: "HugePages_Total: 0\nHugePages_Free: 0\n"}
	_, err := mem.Map(4<<20, HugepageOn)
	if err == nil || !strings.Contains(err.Error(), NrHugepagesPath) || !strings.Contains(err.Error(), "HugePages_Free=0") {
		t.Fatalf("err = %v, want a clear error naming %s", err, NrHugepagesPath)
	}
	if st := mem.Stats(); st != (Stats{}) {
		t.Errorf("failed Map changed stats: %+v", st)
	}
	// And on the real host when it has none free.
	if free, err := (*Memory)(nil).hugepagesFree(); err == nil && free == 0 {
		if _, err := Map(2<<20, HugepageOn); err == nil || !strings.Contains(err.Error(), NrHugepagesPath) {
			t.Fatalf("real host: err = %v", err)
		}
	}
}

// reserveHugepages sets nr_hugepages to n and restores it at cleanup.
func reserveHugepages(t *testing.T, n int) {
	t.Helper()
	old, err := os.ReadFile(NrHugepagesPath)
	if err != nil {
		t.Skipf("cannot read %s: %v", NrHugepagesPath, err)
	}
	if err := os.WriteFile(NrHugepagesPath, []byte(strconv.Itoa(n)), 0o644); err != nil {
		t.Skipf("cannot reserve hugepages (need root and a writable %s): %v", NrHugepagesPath, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(NrHugepagesPath, bytes.TrimSpace(old), 0o644); err != nil {
			t.Errorf("restoring %s: %v", NrHugepagesPath, err)
		}
	})
	free, err := (*Memory)(nil).hugepagesFree()
	if err != nil || free < uint64(n) {
		t.Skipf("asked for %d hugepages, kernel has %d free (%v): memory too fragmented", n, free, err)
	}
}

func TestMapHugeTLB(t *testing.T) {
	reserveHugepages(t, 8)
	var mem Memory
	for _, mode := range []HugepageMode{HugepageOn, HugepageAuto} {
		r, err := mem.Map(3<<20, mode) // rounds up to 4 MiB = 2 pages
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		if r.Kind() != KindHugeTLB || r.MappedSize() != 4<<20 || r.PageSize() != HugePageSize {
			t.Fatalf("%v: kind %s mapped %d", mode, r.Kind(), r.MappedSize())
		}
		checkRW(t, r)
		if st := mem.Stats(); st.HugeTLB != 4<<20 {
			t.Errorf("stats %+v", st)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// More than reserved: On fails clearly, Auto falls back to THP.
	if _, err := mem.Map(64<<20, HugepageOn); err == nil || !strings.Contains(err.Error(), NrHugepagesPath) {
		t.Fatalf("On beyond reservation: %v", err)
	}
	r, err := mem.Map(64<<20, HugepageAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Kind() != KindTHP {
		t.Fatalf("auto beyond reservation: kind %s", r.Kind())
	}
}

func TestPrefaultCancelled(t *testing.T) {
	r, err := Map(16<<20, HugepageOff)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Prefault(ctx); err == nil {
		t.Fatal("Prefault with a cancelled context succeeded")
	}
}

func TestCloseTwice(t *testing.T) {
	var mem Memory
	r, err := mem.Map(1<<20, HugepageOff)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err == nil || !strings.Contains(err.Error(), "already closed") {
		t.Fatalf("second Close: %v", err)
	}
	if r.Bytes() != nil {
		t.Fatal("Bytes after Close is not nil")
	}
	if err := r.Prefault(context.Background()); err == nil {
		t.Fatal("Prefault after Close succeeded")
	}
	if st := mem.Stats(); st.Regions != 0 || st.MappedBytes != 0 {
		t.Fatalf("double close double-counted: %+v", st)
	}
}

func TestMapBadInput(t *testing.T) {
	if _, err := Map(0, HugepageAuto); err == nil {
		t.Error("size 0 accepted")
	}
	if _, err := Map(1<<20, HugepageMode(9)); err == nil {
		t.Error("bad mode accepted")
	}
	if _, err := Map(1<<62, HugepageOff); err == nil {
		t.Error("absurd size accepted")
	}
}

func TestSplit(t *testing.T) {
	mem := make([]byte, 10)
	for i := range mem {
		mem[i] = byte(i)
	}
	cases := []struct {
		seg  uint64
		lens []int
	}{
		{0, []int{10}}, {10, []int{10}}, {100, []int{10}}, {5, []int{5, 5}},
		{3, []int{3, 3, 3, 1}}, {1, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}, {9, []int{9, 1}},
	}
	for _, c := range cases {
		segs := Split(mem, c.seg)
		if len(segs) != len(c.lens) {
			t.Fatalf("seg %d: %d segments, want %d", c.seg, len(segs), len(c.lens))
		}
		next := 0
		for i, s := range segs {
			if len(s) != c.lens[i] || cap(s) != len(s) {
				t.Fatalf("seg %d: segment %d len %d cap %d", c.seg, i, len(s), cap(s))
			}
			if len(s) > 0 && s[0] != byte(next) {
				t.Fatalf("seg %d: segment %d starts at %d, want %d", c.seg, i, s[0], next)
			}
			next += len(s)
		}
		if next != len(mem) {
			t.Fatalf("seg %d: covers %d bytes", c.seg, next)
		}
	}
	if Split(nil, 4) != nil {
		t.Fatal("Split(nil) not nil")
	}
	// Appending to a segment must not clobber the next one.
	segs := Split(mem, 5)
	_ = append(segs[0], 99)
	if segs[1][0] != 5 {
		t.Fatal("append to segment 0 overwrote segment 1")
	}
	// On a real region.
	r, err := Map(5<<20, HugepageOff)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if s := Split(r.Bytes(), 2<<20); len(s) != 3 || len(s[2]) != 1<<20 {
		t.Fatalf("region split: %d segments", len(s))
	}
}

func TestMlockRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop CAP_IPC_LOCK in a child; as non-root the normal tests already cover refusal when RLIMIT_MEMLOCK is small")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=nolock")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	var res struct {
		Locked      bool
		Warnings    []string
		LockedBytes uint64
		OK          bool
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	if res.Locked || res.LockedBytes != 0 || !res.OK {
		t.Fatalf("helper: %+v", res)
	}
	if len(res.Warnings) == 0 || !strings.Contains(res.Warnings[0], "RLIMIT_MEMLOCK") {
		t.Fatalf("warnings %q", res.Warnings)
	}
}

// TestTouchFallback covers the pre-5.14 path of Prefault directly.
func TestTouchFallback(t *testing.T) {
	r, err := Map(3<<20, HugepageOff)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := r.Bytes()
	b[5000] = 42
	touch(b, r.PageSize())
	if b[5000] != 42 {
		t.Fatal("touch changed the contents")
	}
}

// BenchmarkPrefault compares Prefault of a fresh region with the naive
// baseline: a loop writing one byte per 4 KiB page of a fresh mapping.
func BenchmarkPrefault(b *testing.B) {
	const size = 256 << 20
	for _, mode := range []HugepageMode{HugepageOff, HugepageAuto} {
		b.Run(mode.String(), func(b *testing.B) {
			var pf, naive time.Duration
			for range b.N {
				r, err := Map(size, mode)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if err := r.Prefault(context.Background()); err != nil {
					b.Fatal(err)
				}
				pf += time.Since(t0)
				r.Close()
				r, err = Map(size, mode)
				if err != nil {
					b.Fatal(err)
				}
				data := r.Bytes()
				t0 = time.Now()
				for i := 0; i < len(data); i += 4096 {
					data[i] = 1
				}
				naive += time.Since(t0)
				r.Close()
			}
			b.ReportMetric(float64(size)*float64(b.N)/pf.Seconds()/1e9, "GB/s")
			b.ReportMetric(float64(size)*float64(b.N)/naive.Seconds()/1e9, "naive-GB/s")
			b.ReportMetric(naive.Seconds()/pf.Seconds(), "speedup")
		})
	}
}

// TestMapSharedSeenThroughFile maps a shared region and checks that a second,
// independent mapping of its memfd (what a client process does) sees the
// region's bytes and that writes go both ways.
func TestMapSharedSeenThroughFile(t *testing.T) {
	var mem Memory
	mem.meminfo = "HugePages_Free: 0\n"
	for _, mode := range []HugepageMode{HugepageAuto, HugepageOff} {
		r, err := mem.MapShared(3<<20+5, mode)
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		if r.File() == nil {
			t.Fatalf("%v: shared region has no file", mode)
		}
		if err := r.Prefault(context.Background()); err != nil {
			t.Fatal(err)
		}
		checkRW(t, r)
		other, err := unix.Mmap(int(r.File().Fd()), 0, int(r.MappedSize()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		b := r.Bytes()
		b[12345] = 0x5a
		if other[12345] != 0x5a {
			t.Errorf("%v: second mapping does not see the region's write", mode)
		}
		other[len(b)-1] = 0xa5
		if b[len(b)-1] != 0xa5 {
			t.Errorf("%v: region does not see the second mapping's write", mode)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		// The pages live on while another mapping holds them.
		if other[12345] != 0x5a {
			t.Errorf("%v: second mapping lost its bytes when the region closed", mode)
		}
		if err := unix.Munmap(other); err != nil {
			t.Fatal(err)
		}
		if r.File().Fd() != ^uintptr(0) {
			t.Errorf("%v: memfd still open after Close", mode)
		}
	}
	if r, err := mem.Map(1<<20, HugepageOff); err != nil || r.File() != nil {
		t.Fatalf("anonymous region: file %v, err %v", r.File(), err)
	} else {
		r.Close()
	}
	if st := mem.Stats(); st != (Stats{}) {
		t.Errorf("stats after close %+v", st)
	}
}

func TestMapSharedHugeTLB(t *testing.T) {
	reserveHugepages(t, 8)
	r, err := MapShared(3<<20, HugepageOn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Kind() != KindHugeTLB || r.MappedSize() != 4<<20 || r.File() == nil {
		t.Fatalf("kind %s mapped %d file %v", r.Kind(), r.MappedSize(), r.File())
	}
	checkRW(t, r)
	other, err := unix.Mmap(int(r.File().Fd()), 0, int(r.MappedSize()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(other)
	r.Bytes()[3<<20-1] = 7
	if other[3<<20-1] != 7 {
		t.Error("second hugetlb mapping does not see the region's write")
	}
}
