package transfer

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvtier/kvtier/kverr"
)

// sharedMemory maps a memfd of size bytes shared, as dram.MapShared does.
func sharedMemory(size int) (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate("transfer-test", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), "transfer-test")
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, nil, err
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, mem, nil
}

// sharedServer is an in-process engine sharing one memfd region.
func sharedServer(t *testing.T, size int) (*Engine, []byte, string) {
	t.Helper()
	f, mem, err := sharedMemory(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem); f.Close() })
	srv := newEngine(t, Config{})
	if err := srv.ShareMemory(mem, f); err != nil {
		t.Fatal(err)
	}
	fillPattern(mem, 0)
	addr, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, mem, addr.String()
}

// eventually retries f until it returns nil or 5 s pass.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSharedMemoryAcrossProcesses: a client on the same host as a server
// process that shares its segment moves bytes by memcpy through the mapped
// memfd; reads and writes are the server's real memory (a TCP-only client
// sees the writes), checksums and bounds checks behave as over TCP.
func TestSharedMemoryAcrossProcesses(t *testing.T) {
	const size = 8 << 20
	h := startHelperSpec(t, fmt.Sprintf("shm:%d", size))
	cli := newEngine(t, Config{})
	tcpOnly := newEngine(t, Config{DisableSharedMemory: true})
	ctx := context.Background()

	buf := make([]byte, 1<<20)
	eventually(t, "shared path in use", func() error {
		if err := do1(t, cli, Request{Op: Read, Endpoint: h.addr, Segment: helperSegment, Offset: 4096, Buf: buf}); err != nil {
			t.Fatal(err)
		}
		if cli.Stats().SharedRequests == 0 {
			return fmt.Errorf("still over TCP: %+v", cli.Stats())
		}
		return nil
	})
	want := make([]byte, len(buf))
	fillPattern(want, 4096)
	if !bytes.Equal(buf, want) {
		t.Fatal("shared READ returned wrong bytes")
	}
	if cli.SharedPending() {
		t.Fatal("SharedPending after the mapping is in use")
	}
	before := cli.Stats()

	// A checksummed read, a write, and both again across the segment end.
	var sum uint32
	big := make([]byte, 5<<20) // > 2 parts: the parallel copy-and-checksum
	if errs := cli.Do(ctx, []Request{{Op: Read, Endpoint: h.addr, Segment: helperSegment, Offset: 1, Buf: big, Sum: &sum}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if sum != crc32.Checksum(big, crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatal("shared READ checksum wrong")
	}
	val := bytes.Repeat([]byte("shared!"), 1000)
	if err := do1(t, cli, Request{Op: Write, Endpoint: h.addr, Segment: helperSegment, Offset: size - uint64(len(val)), Buf: val}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(val))
	if err := do1(t, tcpOnly, Request{Op: Read, Endpoint: h.addr, Segment: helperSegment, Offset: size - uint64(len(val)), Buf: got}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, val) {
		t.Fatal("a TCP reader does not see the bytes written through shared memory")
	}
	if st := tcpOnly.Stats(); st.SharedRequests != 0 || st.TCPRequests != 1 {
		t.Fatalf("DisableSharedMemory engine: %+v", st)
	}
	err := do1(t, cli, Request{Op: Write, Endpoint: h.addr, Segment: helperSegment, Offset: size - 10, Buf: val})
	wantCode(t, err, kverr.InvalidParams, "outside segment")
	if err := do1(t, tcpOnly, Request{Op: Read, Endpoint: h.addr, Segment: helperSegment, Offset: size - uint64(len(val)), Buf: got}); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("refused write changed the segment (%v)", err)
	}
	// Other segment names still go over TCP (and get TCP's answer).
	err = do1(t, cli, Request{Op: Read, Endpoint: h.addr, Segment: "nope", Buf: got})
	wantCode(t, err, kverr.SegmentNotFound, "nope")
	after := cli.Stats()
	// Successes: the checksummed read and the write went through shared
	// memory; the refused write and the unknown segment are the 2 errors.
	if after.SharedRequests-before.SharedRequests != 2 || after.TCPRequests != before.TCPRequests || after.Errors-before.Errors != 2 {
		t.Fatalf("paths: before %+v after %+v", before, after)
	}

	// The server dies: writes must fail, never land in orphaned memory.
	h.kill()
	eventually(t, "writes fail after the server died", func() error {
		err := do1(t, cli, Request{Op: Write, Endpoint: h.addr, Segment: helperSegment, Buf: val})
		if kverr.CodeOf(err) == kverr.TransferFail {
			return nil
		}
		return fmt.Errorf("write after kill: %v", err)
	})
	if err := do1(t, cli, Request{Op: Write, Endpoint: h.addr, Segment: helperSegment, Buf: val}); kverr.CodeOf(err) != kverr.TransferFail {
		t.Fatalf("write after the client noticed: %v", err)
	}
}

// TestSharedMemoryFollowsRegistrations: segments registered after the
// mapping appear in it, unregistered ones disappear (requests then get
// TCP's SEGMENT_NOT_FOUND), and memory registered outside the shared region
// stays on TCP.
func TestSharedMemoryFollowsRegistrations(t *testing.T) {
	srv, mem, addr := sharedServer(t, 4<<20)
	if err := srv.RegisterSegment("a", mem[:1<<20]); err != nil {
		t.Fatal(err)
	}
	private := make([]byte, 1<<20)
	fillPattern(private, 0)
	if err := srv.RegisterSegment("private", private); err != nil {
		t.Fatal(err)
	}
	cli := newEngine(t, Config{})
	buf := make([]byte, 4096)
	read := func(seg string, off uint64) error {
		return do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: seg, Offset: off, Buf: buf})
	}
	eventually(t, "a mapped", func() error {
		if err := read("a", 0); err != nil {
			t.Fatal(err)
		}
		if cli.Stats().SharedRequests == 0 {
			return fmt.Errorf("not shared yet")
		}
		return nil
	})
	if st := srv.Stats(); st.SharedPeers != 1 || st.ServedErrors != 0 {
		t.Fatalf("server stats %+v", st)
	}
	shared := cli.Stats().SharedRequests
	if err := read("private", 0); err != nil {
		t.Fatal(err)
	}
	if cli.Stats().SharedRequests != shared {
		t.Fatal("a segment outside the shared region went through shared memory")
	}

	if err := srv.RegisterSegment("b", mem[2<<20:3<<20]); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b mapped", func() error {
		n := cli.Stats().SharedRequests
		if err := read("b", 8192); err != nil {
			t.Fatal(err)
		}
		if cli.Stats().SharedRequests == n {
			return fmt.Errorf("b not shared yet")
		}
		return nil
	})
	want := make([]byte, len(buf))
	fillPattern(want, 2<<20+8192)
	if !bytes.Equal(buf, want) {
		t.Fatal("b read from the wrong offset of the shared file")
	}

	if err := srv.UnregisterSegment("a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a gone", func() error {
		err := read("a", 0)
		if kverr.CodeOf(err) == kverr.SegmentNotFound {
			return nil
		}
		return fmt.Errorf("read of unregistered a: %v", err)
	})
	if err := srv.ShareMemory(mem[:1<<20], nil); kverr.CodeOf(err) != kverr.InvalidParams {
		t.Fatalf("ShareMemory without a file: %v", err)
	}
}

// TestSharedMemoryNotOffered: a same-host server that shares nothing
// answers the SHM request with a refusal; the client counts the failed
// discovery, uses TCP, and the server counts no served error.
func TestSharedMemoryNotOffered(t *testing.T) {
	srv, _, addr := serverEngine(t, "seg", 1<<20)
	cli := newEngine(t, Config{})
	buf := make([]byte, 4096)
	eventually(t, "discovery failed", func() error {
		if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Buf: buf}); err != nil {
			t.Fatal(err)
		}
		if cli.Stats().SharedFailures == 0 {
			return fmt.Errorf("no failed discovery yet")
		}
		return nil
	})
	if st := cli.Stats(); st.SharedRequests != 0 || st.TCPRequests == 0 {
		t.Fatalf("client %+v", st)
	}
	if st := srv.Stats(); st.ServedErrors != 0 || st.MalformedFrames != 0 {
		t.Fatalf("server %+v", st)
	}
}

// TestSharedMemoryOtherUserRefused runs a client as another user (nobody):
// the server refuses its shared-memory connection and it stays on TCP.
func TestSharedMemoryOtherUserRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	srv, _, addr := sharedServer(t, 2<<20)
	// The test binary lives in a directory only root may enter: run a copy.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kvtier-shm-test")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyExe := dir + "/transfer.test"
	if err := os.WriteFile(copyExe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copyExe, "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), helperEnv+"=shmclient:"+addr, "GOCOVERDIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as nobody: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "shared=0 ") {
		t.Fatalf("client as nobody: %s", out)
	}
	if st := srv.Stats(); st.SharedRefused == 0 || st.SharedPeers != 0 {
		t.Fatalf("server %+v", st)
	}
}

// runShmClient (helper mode) reads helper-seg-less segment "seg" at addr for
// a while over whatever path the engine picks and prints the path counters.
func runShmClient(addr string) int {
	e, err := New(Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer e.Close()
	buf := make([]byte, 4096)
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) && e.Stats().SharedFailures == 0 {
		// The segment is not registered: TCP answers SEGMENT_NOT_FOUND,
		// and that is fine; the point is the discovery beside it.
		_ = e.Do(context.Background(), []Request{{Op: Read, Endpoint: addr, Segment: "seg", Buf: buf}})
		time.Sleep(10 * time.Millisecond)
	}
	st := e.Stats()
	fmt.Printf("shared=%d failures=%d \n", st.SharedRequests, st.SharedFailures)
	return 0
}

// shmPacket builds a server message.
func shmPacket(kind uint8, name string, size, off uint64) []byte {
	b := make([]byte, shmHeaderLen+len(name))
	binary.BigEndian.PutUint32(b, shmMagic)
	b[4], b[5] = shmVersion, kind
	binary.BigEndian.PutUint16(b[6:], uint16(len(name)))
	binary.BigEndian.PutUint64(b[8:], size)
	binary.BigEndian.PutUint64(b[16:], off)
	copy(b[shmHeaderLen:], name)
	return b
}

// seqpacketPair returns two connected SOCK_SEQPACKET Unix sockets.
func seqpacketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "seqpacket")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// TestShmMessageValidation feeds readShmMsg bad messages from a fake
// server (a socketpair: the only way to send what a real engine never
// would) and checks each is refused with a clear error and maps nothing.
func TestShmMessageValidation(t *testing.T) {
	f, mem, err := sharedMemory(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer unix.Munmap(mem)
	table, err := newFreeTable("good", 1<<20, nil) // a 1 MiB segment's
	if err != nil {
		t.Fatal(err)
	}
	defer func() { table.retire(); table.file.Close() }()
	otherTable, err := newFreeTable("other", 4<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { otherTable.retire(); otherTable.file.Close() }()
	rights := unix.UnixRights(int(f.Fd()), int(table.file.Fd()))
	segOnly := unix.UnixRights(int(f.Fd()))
	v1 := func(b []byte) []byte { b[4] = shmVersionV1; return b }
	cases := []struct {
		name string
		pkt  []byte
		oob  []byte
		want string
	}{
		{"short", []byte("KVTM"), nil, "4 bytes"},
		{"magic", append([]byte("XXXX"), shmPacket(shmSynced, "", 0, 0)[4:]...), nil, "bad magic"},
		{"version", func() []byte { b := shmPacket(shmSynced, "", 0, 0); b[4] = 9; return b }(), nil, "version 9"},
		{"kind", shmPacket(7, "x", 1, 0), nil, "unknown kind 7"},
		{"segment without fd", shmPacket(shmSegment, "s", 4096, 0), nil, "0 descriptors"},
		{"gone with fd", shmPacket(shmGone, "s", 0, 0), rights, "GONE with descriptors"},
		{"synced with fd", shmPacket(shmSynced, "", 0, 0), rights, "SYNCED"},
		{"name length", func() []byte { b := shmPacket(shmSegment, "abc", 4096, 0); b[7] = 9; return b }(), rights, "name length 9"},
		{"empty name", shmPacket(shmGone, "", 0, 0), nil, "name length 0"},
		{"beyond file", shmPacket(shmSegment, "s", 4096, 4<<20), rights, "outside its"},
		{"overflow", shmPacket(shmSegment, "s", ^uint64(0), 4096), rights, "outside its"},
		{"zero size", shmPacket(shmSegment, "s", 0, 0), rights, "outside its"},
		{"no free table", shmPacket(shmSegment, "s", 1<<20, 0), segOnly, "1 descriptors, want 2"},
		{"version 1 with a table", v1(shmPacket(shmSegment, "s", 1<<20, 0)), rights, "2 descriptors, want 1"},
		{"free table of another size", shmPacket(shmSegment, "s", 1<<20, 0), unix.UnixRights(int(f.Fd()), int(otherTable.file.Fd())), "free table of shared segment"},
		{"free table not one", shmPacket(shmSegment, "s", 4<<20, 0), unix.UnixRights(int(f.Fd()), int(f.Fd())), "free table of shared segment"},
	}
	for _, tc := range cases {
		a, b := seqpacketPair(t)
		if _, _, err := a.WriteMsgUnix(tc.pkt, tc.oob, nil); err != nil {
			t.Fatal(err)
		}
		_, _, seg, err := readShmMsg(b)
		if err == nil || !strings.Contains(err.Error(), tc.want) || seg != nil {
			t.Errorf("%s: got %v (segment %v), want error mentioning %q", tc.name, err, seg != nil, tc.want)
		}
	}
	// And a good one maps the right bytes.
	a, b := seqpacketPair(t)
	fillPattern(mem, 0)
	if _, _, err := a.WriteMsgUnix(shmPacket(shmSegment, "good", 1<<20, 3<<20), rights, nil); err != nil {
		t.Fatal(err)
	}
	kind, name, seg, err := readShmMsg(b)
	if err != nil || kind != shmSegment || name != "good" || len(seg.mem) != 1<<20 || seg.frees == nil {
		t.Fatalf("good message: %v %d %q", err, kind, name)
	}
	defer seg.unmap()
	want := make([]byte, 1<<20)
	fillPattern(want, 3<<20)
	if !bytes.Equal(seg.mem, want) {
		t.Fatal("mapped segment has the wrong bytes")
	}
	// The mapped table is the server's: a free published there shows.
	table.Followed(7)
	table.Revoked("good", 8192, 5)
	if got := seg.frees.slots[2].Load(); got != 5 || seg.frees.hdr.outbox.Load() != 7 {
		t.Fatalf("mapped free table: slot %d outbox %d, want 5 and 7", got, seg.frees.hdr.outbox.Load())
	}
	// A version-1 peer's segment (no table) still maps, unchecked.
	a, b = seqpacketPair(t)
	if _, _, err := a.WriteMsgUnix(v1(shmPacket(shmSegment, "old", 1<<20, 0)), segOnly, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, old, err := readShmMsg(b); err != nil || old.frees != nil {
		t.Fatalf("version-1 segment: %v", err)
	} else {
		old.unmap()
	}
}

// FuzzShmMessage: arbitrary packets never panic readShmMsg, and whatever
// it accepts is a known kind.
func FuzzShmMessage(f *testing.F) {
	f.Add(shmPacket(shmSynced, "", 0, 0))
	f.Add(shmPacket(shmGone, "seg", 0, 0))
	f.Add(shmPacket(shmSegment, "seg", 4096, 0))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) == 0 {
			return // a zero-length packet reads as end of stream
		}
		a, b := seqpacketPair(t)
		if _, _, err := a.WriteMsgUnix(pkt, nil, nil); err != nil {
			return // larger than the socket takes
		}
		kind, _, seg, err := readShmMsg(b)
		if err != nil {
			return
		}
		if seg != nil || (kind != shmSynced && kind != shmGone) {
			t.Fatalf("accepted kind %d (segment %v) without a descriptor", kind, seg != nil)
		}
	})
}

// TestCloseDuringSilentDiscovery: a same-host peer that accepts the SHM
// request and never answers must not hold up Close (the discovery is
// bounded by DialTimeout and ends when the engine closes).
func TestCloseDuringSilentDiscovery(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c // read nothing, answer nothing
		}
	}()
	defer func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()
	cli, err := New(Config{DialTimeout: time.Minute, IOTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = do1(t, cli, Request{Op: Read, Endpoint: l.Addr().String(), Segment: "s", Buf: make([]byte, 10)})
	wantCode(t, err, kverr.TransferFail, "")
	start := time.Now()
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("Close took %v behind a silent discovery (DialTimeout 1m)", d)
	}
}
