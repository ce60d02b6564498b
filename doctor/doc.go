// Package doctor owns kvtier's host checks: what an operator must fix on a
// storage box before kvtier can deliver its figures (hugepages reserved and
// free, memlock and open-file limits, transparent hugepages, O_DIRECT and its
// alignment on the SSD directory, free space, the I/O scheduler, NUMA layout,
// clock sync, RDMA and NVMe devices, and whether the transfer engine uses
// RDMA: rdma-transport, from the Config.RDMATransport probe cmd/kvtier
// makes with a transfer engine of the --rdma-device setting).
//
// Run returns a Report: one Check per item with a status (ok, warn, fail,
// skip), what was found, what kvtier wants and the command that fixes it.
// `kvtier doctor` prints it (exit 8 when a check fails) and the REST API
// serves it at /api/v1/system/doctor for the web UI's host page.
//
// Every host path is read under Config.Root ("/" by default) and the
// process-level probes (rlimits, clock, O_DIRECT) are functions in Config, so
// tests run the checks against a prepared directory tree and real
// filesystems (tmpfs refuses O_DIRECT) without touching the host.
//
// doctor imports nothing of kvtier; cmd/kvtier and rest import it.
package doctor
