package target_test

import (
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/target"
)

// leanResult is what one leanPerf run measured.
type leanResult struct {
	ios     uint64
	elapsed time.Duration
	mallocs uint64        // heap allocations in the whole process during the run
	cpu     time.Duration // CPU time (user + system) of the whole process during the run
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// leanPerf drives one I/O queue the way spdk_nvme_perf does, so that the
// figure is the target's and not our initiator's: one goroutine, a command
// for every free slot encoded into one buffer and written with one write,
// completions read in bulk (everything buffered is handled before the next
// write), no goroutine and no allocation per I/O. Reads only (rw "randread"
// or "read"), bs bytes each, qd outstanding, for d.
func leanPerf(b *testing.B, addr string, rw string, bs, qd int, d time.Duration) leanResult {
	adm := dialRaw(b, addr, false, false)
	cpl := adm.connect(0, 0xFFFF, subNQN, hostNQN, 0)
	if !cpl.OK() {
		b.Fatalf("admin connect: %#x", cpl.Status)
	}
	cntlid := uint16(cpl.DW0)
	adm.enable()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	w := pdu.NewWriter(nc)
	// 64 KiB of buffer: larger data is read straight into dst.
	r := pdu.NewReader(nc, pdu.ReaderConfig{Side: pdu.HostSide, BufferSize: 64 << 10})
	if err := w.Send(&pdu.ICReq{}); err != nil {
		b.Fatal(err)
	}
	if f, err := r.Next(); err != nil || f.Type != pdu.TypeICResp {
		b.Fatalf("ICResp: %v", err)
	}
	r.SetNegotiated(pdu.Options{})
	cd := nvme.ConnectData{CNTLID: cntlid, SubNQN: subNQN, HostNQN: hostNQN}
	if err := w.Send(&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.OpcodeFabrics, Flags: 0x40, CID: 1, NSID: uint32(nvme.FabricsConnect),
		SGL: pdu.SGL{Len: 1024, Type: pdu.SGLInCapsule}, CDW10: 1 << 16, CDW11: 127}, Data: cd.Marshal()}); err != nil {
		b.Fatal(err)
	}
	if f, err := r.Next(); err != nil || f.Type != pdu.TypeCapsuleResp || !f.Completion().OK() {
		b.Fatalf("I/O connect: %v", err)
	}
	const lbaSize = 512
	blocks := uint64(256<<20) / lbaSize
	per := uint64(bs / lbaSize)
	dst := make([][]byte, qd)
	for i := range dst {
		dst[i] = make([]byte, bs)
	}
	free := make([]uint16, 0, qd)
	for i := 0; i < qd; i++ {
		free = append(free, uint16(i))
	}
	var out []byte
	var seq, x uint64 = 0, 0x9E3779B97F4A7C15
	var ios uint64
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	start := time.Now()
	deadline := start.Add(d)
	for {
		if len(free) > 0 && time.Now().Before(deadline) {
			out = out[:0]
			for _, cid := range free {
				var slba uint64
				if rw == "randread" {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
					slba = x % (blocks / per) * per
				} else {
					slba = seq % (blocks / per) * per
					seq++
				}
				cmd := pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: nvme.CmdRead, Flags: 0x40, CID: cid, NSID: 1,
					CDW10: uint32(slba), CDW11: uint32(slba >> 32), CDW12: uint32(per - 1), SGL: pdu.SGL{Len: uint32(bs), Type: pdu.SGLTransport}}}
				out = cmd.AppendPDU(out, pdu.Options{})
			}
			free = free[:0]
			if _, err := nc.Write(out); err != nil {
				b.Fatal(err)
			}
		} else if len(free) == qd {
			break // all answered after the deadline
		}
		for first := true; first || r.NextBuffered(); first = false {
			f, err := r.Next()
			if err != nil {
				b.Fatal(err)
			}
			switch f.Type {
			case pdu.TypeC2HData:
				cccid, _, datao, datal := f.DataHeader()
				if err := r.ReadData(dst[cccid][datao : datao+datal]); err != nil {
					b.Fatal(err)
				}
				if f.Flags&pdu.FlagSuccess != 0 {
					free = append(free, cccid)
					ios++
				}
			case pdu.TypeCapsuleResp:
				c := f.Completion()
				if !c.OK() {
					b.Fatalf("read failed: %#x", c.Status)
				}
				free = append(free, c.CID)
				ios++
			default:
				b.Fatalf("unexpected %v", f.Type)
			}
		}
	}
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&ms1)
	return leanResult{ios: ios, elapsed: el, mallocs: ms1.Mallocs - ms0.Mallocs, cpu: cpu}
}

// BenchmarkLeanHostMemory measures the target alone on a DRAM namespace
// (256 MiB, 512-byte blocks) with the lean host above: 4 KiB random reads
// at QD 32 and 128 KiB sequential reads at QD 8, one I/O queue, as the
// issue's comparison with SPDK's nvmf_tgt under spdk_nvme_perf. It reports
// the target's socket system calls and the process's heap allocations
// per I/O (the lean host allocates none per I/O), and the process's CPU
// time per I/O.
func BenchmarkLeanHostMemory(b *testing.B) {
	for _, tc := range []struct {
		name   string
		rw     string
		bs, qd int
	}{{"randread-4K-QD32", "randread", 4096, 32}, {"read-128K-QD8", "read", 128 << 10, 8}} {
		b.Run(tc.name, func(b *testing.B) {
			backing := make([]byte, 256<<20)
			for i := range backing {
				backing[i] = byte(i * 31)
			}
			mem, err := namespace.NewMemory(backing, 512)
			if err != nil {
				b.Fatal(err)
			}
			tg, addr := newTarget(b, target.Config{}, target.Subsystem{Namespaces: []namespace.Namespace{mem}})
			var res leanResult
			before := tg.Stats().Transport
			for i := 0; i < b.N; i++ {
				res = leanPerf(b, addr, tc.rw, tc.bs, tc.qd, benchDuration())
			}
			after := tg.Stats().Transport
			iops := float64(res.ios) / res.elapsed.Seconds()
			b.ReportMetric(iops, "IOPS")
			b.ReportMetric(iops*float64(tc.bs)/1e6, "MB/s")
			b.ReportMetric(float64(res.mallocs)/float64(res.ios), "allocs/IO")
			// CPU per I/O (target and lean host together) is the figure
			// that load from other work on a shared machine moves least:
			// IOPS there depend on how much CPU the process is given.
			b.ReportMetric(float64(res.cpu.Nanoseconds())/1e3/float64(res.ios), "cpu-µs/IO")
			reportSyscalls(b, before, after, res.ios*uint64(b.N))
		})
	}
}
