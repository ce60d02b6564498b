// Package replay replays Mooncake FAST'25 request traces against a kvtier
// store and simulates the master's DRAM eviction policies on them.
//
// It owns: the trace parser (ParseTrace, LoadTrace), the replay driver (Run,
// against any Store with the kvtier/client batch signatures), the pure
// in-memory simulator of the DRAM tier (Simulate, Sweep), and the reports
// (Report, SweepResult: text, JSON, Markdown, SVG). cmd/kvtier's `replay`
// subcommand calls it; tests and benchmarks may too. It imports the standard
// library, kvtier/bench/{hdr,chart,progress} and kvtier/master (for
// LeasePolicy, so the simulator orders evictions with the master's own
// formula); it must not import client or any mechanism (the Store interface
// is defined here).
//
// # Trace format (input)
//
// JSON lines, one request each, with exactly the fields timestamp (ms,
// integer, non-decreasing), input_length and output_length (tokens, >= 0) and
// hash_ids (one non-negative id per 512-token block; len(hash_ids) ==
// ceil(input_length/512)). Blank lines are skipped; anything else is an error
// naming the 1-based line (*ParseError).
//
// # Replay semantics
//
// For each request: BatchExist on every block; BatchGet on the leading run of
// present blocks, stopping at the first failed or unverifiable read; BatchPut
// of the absent blocks (and of prefix blocks that failed to read). Keys are
// KeyPrefix + decimal id ("blk-17"); the payload of block id is BlockBytes of
// FillPayload(id): little-endian 64-bit words of SplitMix64 seeded with id, so
// every read is verified byte for byte. Prefix-hit rate = blocks served as a
// leading prefix / all blocks; request hit rate = requests with >= 1 prefix
// block / requests; prefill tokens saved = min(prefix*512, input_length).
//
// # Simulated policies
//
// lru is the exact-LRU reference of shared/traces/README.md (every block of a
// request touched after the lookup; it reproduces that table exactly). plain
// and frequency model the master (see LeasePolicy): lease deadlines, a key of
// deadline + bonus, eviction of EvictionRatio of capacity (default 5 %) from
// lease-expired objects by O(n) selection whenever use passes HighWatermark
// (default 90 %) or an allocation fails; a put that still finds no room is
// rejected and counted. Exist does not touch leases; a read refreshes one.
//
// # Default frequency policy (chosen with Sweep; trace time at speed 1)
//
// LeaseTTL 5 s, FrequencyBonus 270 s, FrequencyMaxBonus 330 s, each read
// after the first worth at most master.FrequencyExtraLifetimes (0.25) DRAM
// lifetimes (master.Turnover: the time over which the last capacity-many
// blocks were evicted, measured over the passes exactly as the master
// does), eviction history of the last 4 x capacity evictions. The history
// is what makes it work: the master keeps the read counts of evicted keys,
// and a re-put of a remembered key starts at count+1. Without it a popular
// block that is evicted once loses its frequency, and no bonus setting
// beats ~0.106 on the conversation trace at 5,000 blocks; with it the
// default reaches 0.163 there (exact LRU 0.110, plain 0.093). The lifetime
// bound keeps the edge of blocks read often over blocks read once small
// where the cache turns over fast: with a fixed 60 s edge (the bounds
// alone) the policy fell to plain on the synthetic trace at 1,000-1,500
// blocks, where 60 s is ~5 lifetimes. The history must be one FIFO of the
// last N evictions (the simulator's historyTable; the master decides
// validity by a master-wide eviction count): the blocks of a prefix are
// evicted together and must be forgotten together, or a prefix is cut at
// its first block that lost its count. The durations scale with replay
// speed: at --speed S the master's durations must be divided by S (the
// lifetime is measured, so it scales by itself).
//
// # Caveats
//
// Run issues one request at a time (no concurrent requests), so under
// Speed > 0 a slow store makes the replay fall behind rather than overlap.
package replay
