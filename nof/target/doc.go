// Package target owns kvtier's NVMe/TCP controller: it exports NVM
// subsystems whose namespaces are nof/namespace.Namespace values to any
// NVMe/TCP host (the Linux kernel host, SPDK's host, nof/initiator).
// The appliance imports it; it imports nof/pdu, nof/nvme, nof/namespace,
// nof/auth and kverr, internal/clock.
//
// # Contract
//
//   - One TCP connection is one queue pair. ICReq is answered with PFV 0,
//     CPDA 0, the digests the host asked for, and MAXH2CDATA =
//     Config.MaxH2CData.
//   - Fabrics Connect uses the dynamic controller model: an admin Connect
//     (QID 0, CNTLID 0xFFFF) creates a controller with a fresh CNTLID in
//     1..0xFFEF; I/O Connects name it and must come from the same host NQN to
//     the same subsystem, after CC.EN=1, with QID <= the granted number of
//     queues and not already connected. Errors: RECFMT != 0 → SCT 1 SC 0x80;
//     unknown SUBNQN → SC 0x82 IATTR 1 IPO 256; a HOSTNQN that is not empty
//     and not an NQN → SC 0x82 IATTR 1 IPO 512; host not in the subsystem's
//     allow list → SC 0x84 (DW0 IATTR 1 IPO 512); bad CNTLID → SC 0x82 IPO 16;
//     bad SQSIZE → SC 0x82 IATTR 0 IPO 44; bad QID → SC 0x82 IATTR 0 IPO 42.
//   - An empty HOSTNQN (what SPDK's tools send unless given one; SPDK's
//     target accepts it) is accepted by a subsystem that allows any host and
//     by the discovery subsystem (whose log then lists only such
//     subsystems), and refused by a subsystem with an allow list as a host
//     not allowed (SC 0x84, IPO 512).
//   - In-band authentication (DH-HMAC-CHAP, NVMe Base Specification 2.x;
//     the protocol is nof/auth's): a subsystem with Subsystem.HostSecrets
//     admits only the host NQNs that have a secret there (others: SC 0x84 at
//     Connect, counted as refused). Every queue, admin and I/O, then
//     answers Connect with AUTHREQ.ATR (DW0 bit 17; ASCR, bit 18, secure
//     channel concatenation, is never set and a Negotiate asking for it
//     fails) and serves nothing but
//     Authentication Send/Receive (fctype 0x05/0x06, SECP 0xE9, SPSP 01/01,
//     the message in the capsule) and Disconnect until the host completes a
//     transaction: every other command gets SCT 1 SC 0x91 (Authentication
//     Required), counted; and the queue waits at most HeaderTimeout for each
//     PDU. The controller offers SHA-256 and the groups ffdhe2048 then
//     NULL; a host asking for bidirectional authentication needs a
//     CtrlSecrets entry. A failed transaction (wrong secret, bad or
//     out-of-turn message) completes the Send and answers the next Receive
//     with Failure1; the queue stays unauthenticated. Stats.Auth counts
//     successes, failures and refusals. Without secrets (and on the
//     discovery controller) Connect clears ATR and nothing changes. The
//     secret a host presents is bound to its NQN, so an allow list alone
//     (AllowHosts, a self-declared NQN) is no authentication. The cost is
//     paid at connect only (the per-command check is one boolean): a Dial
//     of admin + one I/O queue took 1.1-2.6 ms open, 4.7-6.1 ms with the
//     NULL group and 18.7-19.0 ms with ffdhe2048, bidirectional
//     (BenchmarkConnectAuth, 2026-12-02 01:08 UTC, load average 20 on 2
//     shared vCPUs).
//   - Properties: CAP (MQES = MaxQueueDepth-1, CQR, TO 15 s, CSS NVM, CRWMS),
//     VS 1.3, CC (EN enables: CSTS.RDY = 1; EN 1→0 resets; SHN flushes every
//     namespace and reports CSTS.SHST = 2), CSTS.
//   - Admin: Identify CNS 0/1/2/3, and 5/6 for CSI 0 (all zero; others: invalid field), Set/Get Features
//     (number of queues granted once as min(asked, MaxIOQueues-1); keep-alive
//     timer; async event config and other simple features stored and echoed),
//     Keep Alive, Asynchronous Event Request (held open, at most 4; no events
//     are generated yet), Abort (answers "not aborted"), Get Log Page 0x01,
//     0x02 (SMART with data units / commands counted), 0x03, 0x05 and, on the
//     discovery controller (SUBNQN nqn.2014-08.org.nvmexpress.discovery), 0x70
//     listing each subsystem the host may use once per listener. The
//     discovery controller serves 0x70 only and says so: its Identify
//     Controller has LPA 0x04 (extended data, no Commands Supported and
//     Effects) and FRMW 0, as SPDK's discovery controller.
//   - KATO from Connect or Set Features is rounded up to
//     Config.KeepAliveGranularity (reported as KAS); a controller that gets no
//     Keep Alive for longer than KATO is torn down (all its queues closed).
//     Discovery controllers without a KATO get Config.DiscoveryKATO.
//   - NVM: Read (one C2HData, then a CapsuleResp unless SUCCESS may be used:
//     host disabled SQ flow control, or Config.C2HSuccess), Write (in-capsule
//     up to InCapsuleDataSize on I/O queues, else one R2T for the whole
//     transfer; H2CData split by MAXH2CDATA is accepted in order), Flush, Write
//     Zeroes (ZeroWriter or written zeroes), Dataset Management deallocate
//     (Deallocator, else a no-op). I/O commands on a queue run concurrently,
//     admin commands run in order. For a namespace.Starter (File), a Read or
//     in-capsule Write is validated and its device transfer started by the
//     connection's reader goroutine, and an R2T Write's transfer the moment
//     its last H2CData arrives; transfers of a namespace.Batcher are handed
//     to the device together, once no further whole PDU is already buffered
//     (pdu.Reader.NextBuffered), so back-to-back commands cost one io_submit.
//     A worker goroutine per command waits for the device and answers.
//     For a namespace.Immediate (Memory) a Read, Write, Flush or Write
//     Zeroes runs start to finish on the reader goroutine (inline.go), and
//     its answer is queued and written with the others once no further
//     whole PDU is buffered; small answers of workers completed together
//     also share one write (conn.sendSmall).
//     Answers of such device-backed commands moving at least 64 KiB go out
//     one at a time per connection (the answer turn); while other commands
//     are in flight, the answering worker then lets the Go netpoller run
//     twice (it waits for its own eventfd through the poller) before the
//     next answer may go out, so the host's next command is read and handed
//     to the device first (see turn.go and Performance).
//   - Listeners survive exhaustion: Serve retries a temporary Accept error
//     (EMFILE, ENFILE, ENOBUFS, ENOMEM, ECONNABORTED, or one that says it is
//     Temporary) after a pause doubling from 5 ms to Config.AcceptBackoffMax,
//     as net/http does, and returns only when closed or on a permanent
//     error. Health reports every listener that is retrying or stopped, so
//     the appliance can report itself unhealthy.
//   - Deadlines (deadline.go): the ICReq, then the Connect, must arrive
//     within Config.HeaderTimeout of the previous step, and every PDU
//     (header, data, digests) within HeaderTimeout of its first byte; a
//     host that sends half a header is cut off. Between PDUs, a queue of a
//     controller with a KATO has no read deadline (its keep-alive timer
//     bounds it; I/O queues get no Keep Alive of their own), a queue of a
//     KATO 0 controller waits at most Config.IdleTimeout (default none).
//   - A data digest mismatch (in-capsule data or H2CData) fails only that
//     command with Transient Transport Error (SCT 0 SC 0x22), as NVMe/TCP 1.0
//     and SPDK v26 do; the connection goes on.
//   - Any other bad PDU (see nof/pdu for the FES/FEI table; the target adds unknown
//     TTAG → FES 1 FEI 10, CCCID mismatch → FES 1 FEI 8, H2CData out of the
//     R2T window or out of order → FES 4 FEI 12) gets a C2HTermReq carrying the
//     offending header; the target then half-closes, drains for up to 2 s and
//     closes that connection only. Closing an admin queue destroys its
//     controller.
//
// # Performance
//
// Loopback, our initiator against our target in one test process, fio
// (libaio, direct=1, one job, same block size and queue depth) on the same
// 256 MiB backing file in the same run, in alternating one-second rounds so
// that load from other work falls on both sides alike; 2 vCPUs shared with
// other engineers' benchmarks (load average 3-7 while measuring, figures
// move by ±30% between runs and single rounds by far more). Command:
//
//	go test -run '^$' -bench 'File' -benchtime 2s ./nof/target/
//
// Runs of 2026-11-29 17:59-18:10 UTC, five runs (per-round ratios inside
// one run spread from 0.14 to 0.99 when other benchmarks start or stop):
//
//	128 KiB seq read QD8, 1 I/O queue     0.47-0.51 × fio (≈450-550 MB/s vs 700-1100)
//	128 KiB seq read QD8, 2 I/O queues    0.50-0.71 × fio
//	128 KiB seq write QD8, 1 I/O queue    0.41-0.54 × fio (≈400-700 MB/s vs 830-1630)
//	128 KiB seq write QD8, 2 I/O queues   0.31-0.57 × fio
//	4 KiB randread QD32, O_DIRECT file    0.40-0.58 × fio (11-26k IOPS)
//	4 KiB randread QD32, DRAM namespace   66-70k IOPS (the "0.56-0.59 × SPDK" once written here compared with a spdk_nvme_perf run that lost its queue; see Batching)
//	128 KiB read / write QD8, DRAM        1206-1207 / 1113-1184 MB/s
//
// Against the code before eventfd completions, start-on-reader and
// batched submission (same harness, one I/O queue, the two binaries
// alternated six times): at QD8 the ratios are within the noise (before:
// read 0.39-0.69, write 0.35-0.57; after: read 0.43-0.56, write
// 0.40-0.47, plus one run at 1.12 / 0.75); at QD1, where only each
// command's chain of wake-ups counts, throughput went from 126-207 to
// 212-265 MB/s for reads and from 98-200 to 107-304 MB/s for writes.
//
// Where the overlap went (2026-11-29 19:55-20:40 UTC, per-command
// timestamps): the virtual disk completes a QD-8 batch all at once, for
// fio too (one io_getevents wait, then seven immediate ones), and a
// namespace-only test shows requests submitted up to ~700 µs apart still
// completing together; and the process effectively runs on one scheduler P
// (trace: one goroutine running ~55-60% of the time, two ~3-10%; P1 stayed
// idle for milliseconds with seven runnable goroutines queued on P0;
// GOMAXPROCS=1 measured the same throughput), because waking an idle P
// costs tens of µs or more on this VM. Go runs runnable goroutines before
// it polls the network, so the eight workers readied by one batch sent all
// eight 128 KiB answers (~25-80 µs of writev each) before the host's next
// command was even read: the first command of the next batch reached the
// device 590-750 µs (p50) after the batch completed (reads and writes),
// while fio resubmits within ~20 µs; disk and network alternated. With the
// answer turn the first resubmission comes 110-150 µs (reads) and
// 200-280 µs (R2T writes) after the batch, each command's round trip
// (C2HData, host read, next command, io_submit) runs back to back at
// ~65 µs, and the device has work while the rest of the batch is answered.
// In-run ratios, one I/O queue, three runs each alternated with the code
// before the turn (20:25 UTC, fio steady at 1.13-1.27 GB/s read and
// 1.6-2.0 GB/s write): 128 KiB seq read 0.60-0.72 × fio (744-843 MB/s)
// against 0.46-0.56 (530-672 MB/s); write unchanged at 0.46-0.53 against
// 0.44-0.51. 4 KiB and DRAM-namespace paths do not use turns and are
// unchanged.
//
// Where a 128 KiB write goes (2026-11-29 20:43-21:01 UTC, quiet machine,
// CPU profiles of SeqWrite128KFile queues=1, per write): the process
// spends ≈166 µs of CPU per write, on ≈1.2 CPUs, at 7.4-7.9k writes/s
// (0.48-0.51 × fio at 1.9-2.1 GB/s). The initiator's writev of the 128 KiB
// H2CData is 60 µs (the loopback send copies into cold socket pages and
// runs the receiver's TCP input), io_submit 25 µs (fio's slat: 14 µs;
// 56-60 µs on a loaded machine), socket reads 20 µs (one copy into the
// pool buffer, plus up to 64 KiB of the payload that arrived with the
// header copied out of the Reader's bufio, ≈5 µs), the three small PDUs
// (command, R2T, CapsuleResp) 21 µs, the answer turn 10 µs, the rest Go
// scheduling and netpoll. There is one copy of the payload per side (the
// initiator writes from the caller's buffer, the target reads into an
// aligned pool buffer that O_DIRECT writes from); data digests are off in
// the benchmarks; buffer pools do not churn (≈3 MB of AlignedBlock per
// 6 s run). Raw loopback TCP with 128 KiB writes alone moves 2.0-3.0 GB/s
// at ≈70 µs of CPU per 128 KiB (BenchmarkSeq128KMemory reports it as
// tcp-MB/s), so the copies through loopback plus io_submit (≈95-100 µs
// of CPU per write) already use up the ≈82-98 µs that 0.8 × fio
// (≈1.6 GB/s, 12.2k writes/s) allows on the 1-1.2 CPUs the process gets:
// with the initiator in the same VM, the goal would need a protocol path
// that costs nothing, and 0.8 × fio is not reachable on this VM. (About
// 80 of the 166 µs are the initiator's: its copy, command and reads.)
// Measured and not the lever: sending the data in the capsule instead of
// R2T (InCapsuleDataSize 131072: 1.08-1.10 GB/s against 0.98-1.11, three
// alternations, ≈+5%, no R2T, no second hand-off); the reader sending
// the R2T itself (0.54-0.59 against 0.48-0.55, 930-1043 against
// 924-1033 MB/s, four alternations; reverted: a reader that writes to the
// socket can deadlock with a host blocked writing H2CData) or queueing the
// R2Ts of commands that arrived together for their first worker to write
// in one go (0.49-0.54 against 0.51-0.56); answering writes
// without the turn (0.47-0.50 against 0.48-0.61 with it); holding
// io_submit while more bytes sit in the socket (1.15-1.37 transfers per
// call, no change); adaptive goroutine stacks (no change); and running
// the initiator in a separate process (0.34-0.36 against 0.44-0.50 in
// one process: cross-CPU wake-ups cost more than the P the process
// shares). The "DRAM ceiling" of ~1.1 GB/s for writes was the namespace's
// untouched memory (a page fault per 4 KiB on first write, while reads
// copied from the shared zero page); with its memory written first the
// DRAM namespace takes 128 KiB writes at 1.40-1.64 GB/s and reads at
// 1.22-1.72 GB/s; writes 0.51-0.75 × raw TCP in the same run.
// Checked and not the cause: the batched io_submit (command received →
// submit 5-8 µs p50), eventfd reaping (completions come from the device
// together), Writer.Send's lock (the sends serialise on the one P, not on
// the lock), socket buffer sizes (4 MiB buffers did not change loopback
// throughput).
//
// The 0.8 × fio sequential goal is not met on this machine. The file
// layer alone keeps up with fio (nof/namespace BenchmarkFileSeq128KQD8:
// 0.7-1.7 × fio at the same depth), so the gap is the NVMe/TCP path: per
// 128 KiB I/O our process spends ≈110-210 µs of CPU (two kernel copies of
// the payload through loopback TCP ≈80 µs, io_submit ≈20-40 µs, small
// PDUs and scheduling) and 1.3-2.4 context switches, 0.2-0.6 of them
// involuntary, where fio spends ≈14 µs and 0.15-0.2 switches; at a fixed
// queue depth of eight every wake-up that waits behind another tenant's
// thread adds to each command's latency (p50 1.0-2.0 ms against fio's
// 0.6-1.0 ms), and throughput is depth / latency.
//
// The floor (2026-11-29 23:45-23:55 UTC). The sequential
// file benchmarks also run, in every round between ours and fio, a
// program with no protocol at all (floor_test.go): the payload through
// one loopback TCP connection per I/O queue and O_DIRECT I/O by QD
// goroutines at the same block size and depth, the least that any target
// serving a file to a host on loopback can cost on this machine. The file
// half alone keeps up with fio (1.6-2.2 GB/s of 128 KiB writes at depth 8
// against fio's 1.4-2.0 in the same runs), the TCP half alone moves
// 1.7-2.0 GB/s; together, sharing the two vCPUs, they add up. Five runs of
// one queue and three of two (ranges; floor-MB/s, floor-vs-fio,
// ratio-vs-floor in the output):
//
//	                     floor × fio   ours × fio   ours × floor
//	read, 1 I/O queue    0.64-0.78     0.56-0.77    0.83-1.00
//	read, 2 I/O queues   0.76-0.87     0.68-0.75    0.86-0.93
//	write, 1 I/O queue   0.53-0.72     0.52-0.59    0.83-1.06
//	write, 2 I/O queues  0.54-0.64     0.55-0.62    0.86-1.12
//
// Our target runs at the floor (0.83-1.12 of it). The 0.8 × fio goal is
// above the floor for writes in every run and at its top for reads: no
// target design can meet it here while the host shares the VM's two
// vCPUs and the bytes cross loopback TCP. Against a host on another
// machine the TCP receive (writes) or send (reads) half would not be
// paid on the target's CPUs. (This paragraph used to say the DRAM
// namespace met TARGETS.md's figures against SPDK, 0.84 × 118k IOPS: the
// 118k was a lab run of spdk_nvme_perf that lost its queue; SPDK's
// nvmf_tgt measured properly does 225k with spdk_nvme_perf on one core,
// and this target then did 64k, 0.28 ×; see issue #18 and below.)
//
// # Batching (issue #18, 2026-12-02)
//
// Where a 4 KiB read of a DRAM namespace went before (CPU profile and
// counters, BenchmarkLeanHostMemory and BenchmarkRandRead4KQD32Memory):
// the reader decoded the command and started a goroutine for it (a
// hand-off and a wake-up per command, and a stack growth: runtime.newstack
// was 8.5% of the CPU); the goroutine copied the data from the namespace
// into a pool buffer, then into the Writer's arena (two copies, 4 KiB is
// under the by-reference threshold), and, finding no flush in progress,
// wrote its answer itself: 0.72-0.83 write system calls per I/O on the
// target (each ~2 µs on this VM; reads were already batched, 0.05-0.06 per
// I/O, by the 64 KiB buffered reader), and 6.7 heap allocations per I/O.
// Our initiator did the same on its side (a write per command, 1.6-1.8
// writes per I/O for the whole process).
//
// Now: commands of a memory namespace run inline on the reader, the data is
// copied once (namespace → output, pdu.AppendC2HDataFill), answers are
// queued and written together (0.03-0.05 write and read system calls per
// I/O: 20-30 commands per system call), no goroutine and 0.03 heap
// allocations per I/O; the initiator queues the capsules of callers that
// submit together and writes them with one writev (0.06 writes per I/O).
// File namespaces keep their worker per command (a device wait must not
// block the reader) but small answers completed together share a write.
//
// Measured 2026-12-02 00:37-00:39 UTC, load average 14-15 on the 2 shared
// vCPUs, three alternations of the code before (ed4fa2b, main, with only the
// counters and benchmarks added) and after; CPU time per I/O is of the whole
// process (host and target) and is what others' load moves least:
//
//	KVTIER_NOF_BENCH_SECONDS=2 go test -run '^$' -bench 'Memory' -benchtime 1x ./nof/target/
//
//	                                     before               after
//	4K randread QD32, lean host       43-148k IOPS         147-246k IOPS
//	                                 4.9-5.1 µs CPU       1.8-2.5 µs CPU
//	                                 0.73-0.80 tgt wr/IO  0.032 tgt wr/IO
//	                                 6.7 allocs/IO        0.06 allocs/IO
//	4K randread QD32, our initiator   77-123k IOPS        194-403k IOPS
//	                                 6.4-7.1 µs CPU       2.3-2.5 µs CPU
//	128K seq read QD8, lean host      525-1591 MB/s       635-1822 MB/s
//	                                 66-74 µs CPU         62-68 µs CPU
//	128K seq read QD8, our initiator 1009-1271 MB/s      1021-1401 MB/s
//	                                 72-80 µs CPU         64-68 µs CPU
//	128K seq write QD8, initiator     571-1061 MB/s       673-865 MB/s
//	                                 76-84 µs CPU         82-85 µs CPU
//
// File namespace (O_DIRECT, still one worker per command; small answers
// share writes, and the initiator batches its capsules), 4 KiB randread
// QD32 beside fio on the same file in the same run, two alternations at
// 00:45 UTC: before 37-38k IOPS, 0.38-0.41 × fio; after 48-56k IOPS,
// 0.55-0.60 × fio (go test -run '^$' -bench RandRead4KQD32File -benchtime 1x).
//
// The whole lean-host 4 KiB process under perf stat (perf stat -e
// 'raw_syscalls:sys_enter,context-switches,...' on the test binary, same
// bench, 00:41 UTC): 1.18 system calls and 0.084 context switches per I/O
// before (0.77 write, 0.24 read, 0.13 epoll_pwait, 0.017 futex), 0.38 and
// 0.011 after (0.09 write, 0.03 writev, 0.19 read, 0.06 epoll_pwait; the
// remaining reads are mostly the lean host's).
//
// The reader never waits for the socket: answers go out with
// pdu.Writer.Push (one non-blocking writev; what the socket does not take
// is written by a goroutine while the reader reads on), so a host blocked
// writing to us cannot deadlock with a reader blocked writing to it
// (TestBlockingHostNoDeadlock fails with a blocking write there).
//
// In a CPU profile of the lean-host 4 KiB run the target's goroutines
// take about two thirds of the process (≈1.1 µs per I/O, ≈3.4 µs before),
// so one core of this VM would serve several hundred thousand 4 KiB reads
// a second. The 128 KiB write path copies H2CData into a pool buffer and
// then into the namespace (a failed digest must change nothing), which is
// why it did not gain.
//
// # Against SPDK (issue #18, 2026-12-02 02:34-03:12 UTC)
//
// SPDK v26.05 (upstream DPDK v26.03, ISA-L) built outside the repository;
// nof/spdkcompare/run.sh SPDK_DIR runs SPDK's nvmf_tgt (-m: one core,
// malloc bdev, default TCP transport) and our target (nof/spdkcompare/ktgt
// under taskset: one core, one Go P, DRAM namespace) one at a time on core
// 0, spdk_nvme_perf (one core, 10 s) or our initiator (`kvtier nvme perf
// --queues 1`) on core 1, the two targets alternating case by case, two
// runs each. Ranges of kvtier / SPDK per run, both targets driven by
// spdk_nvme_perf (the full tables, with absolute figures, are in the
// README and issue #18's report):
//
//	                          default nvmf_tgt   nvmf_tgt --interrupt-mode
//	4K randread QD32          5.1-7.1 ×          1.7-4.0 ×
//	4K randread QD32 + dgst   3.9-19.7 ×
//	4K randrw 70/30 QD32      0.65-17.4 ×
//	128K seq read QD8         1.1-19.6 ×         2.7-4.0 ×
//	128K seq write QD8        2.6-10.6 ×         1.25-1.40 ×
//	128K read QD8 + dgst      0.25-3.8 ×
//
// These ratios say more about this machine than about either target: two
// vCPUs of a Firecracker VM shared with three other engineers' builds and
// benchmarks (load average 6-9). SPDK polls: its target and its perf each
// spin on their core, and whenever the hypervisor or the other tenants
// take the core the poller loses a whole slice. spdk_nvme_perf reported
// maximum latencies of 0.5-1.5 s in most SPDK-against-SPDK runs, and
// SPDK's 4 KiB figure swung from 2k to 194k IOPS between consecutive runs
// (issue #18's lab run, on a quieter machine, had 225k). Our target
// sleeps in epoll and used 7-17 % of its core while spdk_nvme_perf drove it
// (CPU profiles, 4 KiB and 128 KiB reads: the rest was waiting for the
// host), so what limited those runs was the host, and the one lever the
// profiles show (busy-polling the socket for 30-100 µs before parking,
// tried and measured: no better, not kept) would only spend a core the
// way SPDK does. The goals (≥ 0.5 × at 4 KiB, ≥ 0.8 × at 128 KiB, our
// initiator ≥ 0.8 × spdk_nvme_perf against nvmf_tgt) hold in every run
// except single runs where SPDK got a quiet window (randrw 0.65 ×,
// 128 KiB read with digests 0.25 ×); they are not a statement about SPDK
// on dedicated cores, which this machine cannot show.
//
// Locking: Target.mu guards the subsystem, controller, listener and
// connection tables; controller.mu guards one controller's registers and
// queues; conn.mu guards its R2T table. None is held across network or disk
// I/O (CC shutdown flushes outside controller.mu). The answer turn
// (answerTurn.tok) is not a lock over data but an ordering token that is
// held across one send and its yields by design; a failed connection fails
// Send at once, so the token keeps moving while the connection drains.
package target
