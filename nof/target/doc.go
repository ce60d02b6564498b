// Package target owns kvtier's NVMe/TCP controller: it exports NVM
// subsystems whose namespaces are nof/namespace.Namespace values to any
// NVMe/TCP host (the Linux kernel host, SPDK's host, nof/initiator).
// The appliance imports it; it imports nof/pdu, nof/nvme, nof/namespace and
// internal/kverr, internal/clock.
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
//     unknown SUBNQN → SC 0x82 IATTR 1 IPO 256; host not in the subsystem's
//     allow list → SC 0x84 (DW0 IATTR 1 IPO 512); bad CNTLID → SC 0x82 IPO 16;
//     bad SQSIZE → SC 0x82 IATTR 0 IPO 44; bad QID → SC 0x82 IATTR 0 IPO 42.
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
//     listing each subsystem the host may use once per listener.
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
//     admin commands run in order.
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
// (libaio, direct=1, same queue depth) on the same 256 MiB backing file in
// the same run; 2 vCPUs shared with other work (load average ≈10, so
// figures move by ±50% between runs). Command:
//
//	KVTIER_NOF_BENCH_SECONDS=4 go test -run XXX -bench . -benchtime 1x ./nof/target/
//
// Run of 2026-11-29 16:10 UTC (earlier runs in brackets):
//
//	4 KiB randread QD32, DRAM namespace   85.8k IOPS = 0.73 × SPDK's 118k   [66k, 72k]
//	128 KiB read / write QD8, DRAM        1307 / 1091 MB/s                   [1395 / 930]
//	4 KiB randread QD32, O_DIRECT file    23.8k IOPS vs fio 59.3k = 0.40    [0.35-0.45]
//	128 KiB seq read QD8, O_DIRECT file   694 MB/s vs fio 1199 = 0.58        [0.57-0.59]
//	128 KiB seq write QD8, O_DIRECT file  444 MB/s vs fio 2132 = 0.21        [756-915 MB/s = 0.43-0.59]
//
// At equal queue depth the protocol's own latency (TCP round trip, two
// scheduler hops per side; p50 ≈0.7 ms for 128 KiB under this load) adds
// to the disk's, so file-backed figures trail fio's; the DRAM figures are
// the protocol ceiling on this machine. The 0.5 × SPDK goal is met on DRAM;
// the 0.8 × fio sequential goal is not met on this shared VM.
//
// Locking: Target.mu guards the subsystem, controller, listener and
// connection tables; controller.mu guards one controller's registers and
// queues; conn.mu guards its R2T table. None is held across network or disk
// I/O (CC shutdown flushes outside controller.mu).
package target
