// Command fakekvtier is a FAKE of the kvtier CLI surface that scripts/bench.sh
// drives (standalone, bench --master/--baseline/--report), used only by
// bench's script test while cmd/kvtier's bench subcommand is written
// elsewhere. Its "standalone" holds objects in a process-local map and its
// "bench --master" measures that map, not a kvtier store: never publish its
// numbers. --baseline and --report run the real bench code.
package main
