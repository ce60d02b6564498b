// Package bench measures a kvtier store beside its physical limits and its
// everyday alternative, in one run on one host, and reports ratios.
//
// It owns: the workloads (Run: put | get | mixed | exist over object sizes,
// concurrency and batch size, with bounded bytes in flight), the baselines
// (RawTCP: a plain Go sender and receiver on loopback moving the same bytes;
// RawTCPProcess: the same with the receiver, ServeSink, in a second process
// started through StartSink, since kvtier's client and appliance are two
// processes and cross-process wake-ups cost more than a goroutine hand-off;
// Memcpy), the converters for external tools (ParseRedisCSV for
// redis-benchmark --csv, ParseIperf3 for iperf3 -J, ParseFio for fio
// --output-format=json) and the report (Report: Markdown, JSON and an SVG
// chart). cmd/kvtier's `bench` subcommand calls it; scripts/bench.sh drives
// that subcommand. It imports only the standard library, golang.org/x/sys and
// its subpackages hdr (latency histogram), chart (SVG) and progress (terminal
// bar); the Store interface is defined here, so it never imports client.
//
// # Measurement rules
//
// Each (op, size, concurrency) runs for Duration with Concurrency callers.
// Value buffers come from one pool per workload holding at most
// MaxInFlightBytes (default 256 MiB), pre-faulted before timing, so bytes in
// flight are bounded however many callers there are; a caller waits for a
// buffer before it starts timing. Puts write fresh keys
// (KeyPrefix + "put-SIZE-SEQ"); get, mixed and exist first load up to 1024
// keys per size within KeyBudgetBytes and then pick keys uniformly. A get
// that returns fewer bytes than the size, or an Exist that says false,
// counts as an error. Latency is per call (one key, or one batch), recorded
// in an hdr.Histogram per caller and merged.
//
// # Result format (kvtier bench --json)
//
// One JSON object per line and workload: system, op, size (bytes),
// concurrency, batch, replicas, ops, errors, seconds, ops_per_sec,
// gbytes_per_sec (10^9 B/s of object data), p50_us, p99_us, p999_us,
// first_error when any operation failed (a workload where all failed makes
// the CLI exit non-zero: see Failed), transport for kvtier, and for
// baselines skipped and note. A workload measured beside a baseline
// (Options.Beside, kvtier bench --beside) adds beside, rounds,
// beside_gbytes_per_sec, beside_p50_us, over_beside and, from single
// rounds, over_beside_min and over_beside_max.
//
// # Measuring in turns
//
// On a shared machine the same loopback transfer runs at half or twice
// its rate from one minute to the next, so a kvtier figure and a baseline
// measured minutes apart give a ratio that is mostly noise. With Beside,
// each workload runs in Rounds turns against a tcp or tcp-process
// baseline of the same size with a connection per caller (kept open
// across turns, as kvtier keeps its own), Duration/Rounds a side, the
// order alternating each round; kvtier's figures cover its own turns
// only. Exist workloads move no bytes and run without a baseline.
// scripts/bench.sh measures its TCP-only pass this way.
//
// # Report input directory (written by scripts/bench.sh, read by LoadDir)
//
//	*.jsonl                    Result lines (kvtier bench --json, --baseline)
//	redis-SIZE-CLIENTS.csv     redis-benchmark --csv output for that size and -c
//	iperf3-*.json              iperf3 -J client output
//	fio-*.json                 fio --output-format=json output
//	skipped.txt                lines "system: reason" for baselines not run
//
// bench/internal/fakekvtier is a fake of the CLI surface scripts/bench.sh
// drives, used only by TestBenchScript to exercise the script's process
// handling and report; its "kvtier" numbers measure a map and mean nothing.
//
// Ratios match a kvtier result with the tcp result of the same size and
// concurrency (or the baseline it was measured beside in turns), and the
// redis result of the same op (put = SET), size and client count.
package bench
