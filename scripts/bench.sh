#!/usr/bin/env bash
# scripts/bench.sh — `make bench`: measure kvtier and its baselines on this host, in
# one run, and write results/<UTC timestamp>/{results.md,results.json,throughput.svg}
# (raw tool outputs under raw/). Baselines: raw loopback TCP (kvtier's Go sender and
# receiver in one process, the same with the receiver in a second process as kvtier's
# client and appliance are, plus iperf3 when installed), memcpy, Redis (redis-server + redis-benchmark
# when installed, same value sizes and client counts), fio on the SSD directory when
# installed. A tool that is missing is reported as "skipped (not installed)", never
# faked. Every process this script starts is stopped on exit, error or Ctrl-C.
#
# Environment (all optional):
#   KVTIER_BIN       kvtier binary                     (./bin/kvtier)
#   BENCH_SIZES      object sizes, comma-separated     (64KiB,1MiB,16MiB)
#   BENCH_CLIENTS    client counts, comma-separated    (1,4,50)
#   BENCH_OPS        kvtier workloads                  (put,get)
#   BENCH_DURATION   seconds per workload              (3)
#   BENCH_DRAM       DRAM of the standalone store      (4GiB)
#   BENCH_OFFLOAD    standalone --offload mode         (off: measure the DRAM path)
#   BENCH_SSD_DIR    SSD tier directory (fio runs here) (a fresh temporary directory)
#   BENCH_OUT        output directory                  (results/<timestamp>)
#   BENCH_TCP_SIZES  sizes measured again with --shm=false (1MiB; empty: none): the
#                    bench client runs on the appliance's host, so by default it maps
#                    the appliance's memory; this pass shows the loopback-TCP path
#                    remote clients use, in turns with raw TCP to another process
#                    (--beside tcp-process, 4 rounds of BENCH_DURATION/2 a side), so
#                    its ratio holds on a machine whose speed drifts
#   BENCH_TCP_BESIDE the raw TCP those rows run in turns with: hot (tcp-process, one
#                    buffer in the cache; the default), store (puts beside
#                    tcp-process-store, other ops beside tcp-process-cold: raw TCP moving
#                    the memory traffic a store moves) or both
#   BENCH_CLUSTER_SIZES sizes measured again, TCP only and in turns with the store-shaped
#                    baselines, against `kvtier master` and `kvtier appliance` in separate
#                    processes, as a cluster runs (64KiB,1MiB; empty: none): a standalone's
#                    box calls its master in-process, a cluster's box over a socket
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${KVTIER_BIN:-./bin/kvtier}
SIZES=${BENCH_SIZES:-64KiB,1MiB,16MiB}
CLIENTS=${BENCH_CLIENTS:-1,4,50}
OPS=${BENCH_OPS:-put,get}
DURATION=${BENCH_DURATION:-3}
DRAM=${BENCH_DRAM:-4GiB}
TCP_SIZES=${BENCH_TCP_SIZES-1MiB}
TCP_BESIDE=${BENCH_TCP_BESIDE:-hot}
CLUSTER_SIZES=${BENCH_CLUSTER_SIZES-64KiB,1MiB}
OFFLOAD=${BENCH_OFFLOAD:-off}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${BENCH_OUT:-results/$STAMP}
RAW=$OUT/raw

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ -x $BIN ]] || die "$BIN not found or not executable (run make build)"
[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "BENCH_DURATION must be whole seconds > 0"
[[ $TCP_BESIDE == hot || $TCP_BESIDE == store || $TCP_BESIDE == both ]] || die "BENCH_TCP_BESIDE must be hot, store or both (got $TCP_BESIDE)"
mkdir -p "$RAW"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-bench.XXXXXX")
SSD_DIR=${BENCH_SSD_DIR:-$WORK/ssd}
mkdir -p "$SSD_DIR"

# --- process bookkeeping: every background process goes through start_bg ---------------
PIDS=()
start_bg() { # start_bg LOGFILE CMD...  (sets BG_PID)
	local logf=$1
	shift
	# Created here, not by the child's redirect: the caller reads it at
	# once, and a child not yet scheduled has not opened it (sed: can't
	# read, seen in CI under load).
	: >"$logf"
	"$@" >>"$logf" 2>&1 &
	BG_PID=$!
	PIDS+=("$BG_PID")
}
stop_pid() { # stop_pid PID: TERM, wait up to 10 s, then KILL
	local pid=$1 i
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
cleanup() {
	local rc=$? pid
	for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
	rm -rf "$WORK"
	if ((rc != 0)); then log "failed (exit $rc); partial raw outputs in $RAW"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- helpers -------------------------------------------------------------------------
wait_line() { # wait_line LOGFILE PID SED-EXPR WHAT: prints the first match within 60 s
	local logf=$1 pid=$2 expr=$3 what=$4 got= i
	for ((i = 0; i < 600; i++)); do
		got=$(sed -n "$expr" "$logf" | head -n 1)
		[[ -n $got ]] && break
		kill -0 "$pid" 2>/dev/null || {
			cat "$logf" >&2
			die "$what exited during start"
		}
		sleep 0.1
	done
	[[ -n $got ]] || die "$what printed no listening line within 60 s"
	echo "$got"
}
# tcp_rows MASTER OUT SHAPES SIZE...: kvtier's TCP-only rows against MASTER, appended to
# OUT, each in turns with raw TCP to another process shaped as SHAPES says (hot, store,
# both: see BENCH_TCP_BESIDE)
tcp_rows() {
	local master=$1 out=$2 shapes=$3 op size c shape beside
	shift 3
	for op in "${OP_LIST[@]}"; do
		for size in "$@"; do
			for c in "${CLIENT_LIST[@]}"; do
				for shape in hot store; do
					[[ $shapes == both || $shapes == "$shape" ]] || continue
					beside=tcp-process
					if [[ $shape == store ]]; then
						beside=tcp-process-cold
						[[ $op == put ]] && beside=tcp-process-store
					fi
					log "kvtier $op size $size clients $c against $master, TCP only, in turns with raw TCP to another process ($beside)"
					"$BIN" bench --master "$master" --json --op "$op" --size "$size" --concurrency "$c" \
						--duration "$((2 * DURATION))s" --shm=false --beside "$beside" >>"$out"
				done
			done
		done
	done
}
to_bytes() { # 64KiB -> 65536
	local s=$1 n unit
	[[ $s =~ ^([0-9]+)([KMG]i?B?|B)?$ ]] || die "bad size $s"
	n=${BASH_REMATCH[1]}
	unit=${BASH_REMATCH[2]}
	case $unit in
	"" | B) echo "$n" ;;
	K*) echo $((n << 10)) ;;
	M*) echo $((n << 20)) ;;
	G*) echo $((n << 30)) ;;
	esac
}
listening() { # listening PORT: a TCP socket is in LISTEN on PORT (read from /proc; no
	# connection is made, which would consume iperf3 -s -1's single test)
	local hex
	hex=$(printf ':%04X' "$1")
	awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}
port_free() { ! listening "$1"; }
free_port() { # a port nothing listens on now (the server binds it right after)
	# Below the kernel's ephemeral range (ip_local_port_range, 32768 up by
	# default): a port picked there can be taken by some process's outgoing
	# connection before the server binds it (redis-server then exits).
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 12000))
		if port_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	die "no free port found"
}
wait_port() { # wait_port PORT PID: until something listens, the process dies, or 30 s
	local i
	for ((i = 0; i < 300; i++)); do
		port_free "$1" || return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
skip() { # skip SYSTEM REASON
	log "$1: $2"
	echo "$1: $2" >>"$RAW/skipped.txt"
}
have() { command -v "$1" >/dev/null 2>&1; }

IFS=, read -r -a SIZE_LIST <<<"$SIZES"
IFS=, read -r -a CLIENT_LIST <<<"$CLIENTS"
IFS=, read -r -a OP_LIST <<<"$OPS"
IFS=, read -r -a TCP_SIZE_LIST <<<"$TCP_SIZES"
IFS=, read -r -a CLUSTER_SIZE_LIST <<<"$CLUSTER_SIZES"
: >"$RAW/skipped.txt"
{
	echo "host: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kvtier: standalone --dram $DRAM --offload $OFFLOAD, ${DURATION}s per workload"
	((${#CLUSTER_SIZE_LIST[@]} == 0)) || echo "cluster: kvtier master + kvtier appliance --dram $DRAM, TCP only, sizes $CLUSTER_SIZES"
	echo "started: $STAMP"
} >"$RAW/notes.txt"

# --- kvtier --------------------------------------------------------------------------
log "starting kvtier standalone (dram $DRAM, offload $OFFLOAD)"
start_bg "$RAW/standalone.log" "$BIN" standalone --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
	--data-addr 127.0.0.1:0 --dram "$DRAM" --offload "$OFFLOAD" --ssd-dir "$SSD_DIR"
KV_PID=$BG_PID
MASTER=$(wait_line "$RAW/standalone.log" "$KV_PID" 's/.*listening grpc=\([^ ]*\).*/\1/p' "kvtier standalone")
log "kvtier master at $MASTER"
for op in "${OP_LIST[@]}"; do
	for size in "${SIZE_LIST[@]}"; do
		for c in "${CLIENT_LIST[@]}"; do
			log "kvtier $op size $size clients $c"
			"$BIN" bench --master "$MASTER" --json --op "$op" --size "$size" --concurrency "$c" \
				--duration "${DURATION}s" >>"$RAW/kvtier.jsonl"
		done
	done
done
tcp_rows "$MASTER" "$RAW/kvtier.jsonl" "$TCP_BESIDE" "${TCP_SIZE_LIST[@]}"
stop_pid "$KV_PID"

# --- kvtier as a cluster: master and appliance in separate processes -------------------
if ((${#CLUSTER_SIZE_LIST[@]} > 0)); then
	log "starting kvtier master and appliance (dram $DRAM, offload $OFFLOAD)"
	start_bg "$RAW/cluster-master.log" "$BIN" master --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --offload "$OFFLOAD"
	CM_PID=$BG_PID
	CMASTER=$(wait_line "$RAW/cluster-master.log" "$CM_PID" 's/.*listening grpc=\([^ ]*\).*/\1/p' "kvtier master")
	start_bg "$RAW/cluster-appliance.log" "$BIN" appliance --master "$CMASTER" --name bench-box \
		--data-addr 127.0.0.1:0 --dram "$DRAM" --ssd-dir ""
	CA_PID=$BG_PID
	wait_line "$RAW/cluster-appliance.log" "$CA_PID" 's/.*listening data=\([^ ]*\).*/\1/p' "kvtier appliance" >/dev/null
	# The appliance says listening before its segment's mount reaches the
	# master: the first rows would find no room. Put until a put lands.
	for ((i = 0; i < 100; i++)); do
		"$BIN" bench --master "$CMASTER" --json --op put --size 4KiB --concurrency 1 --duration 1s --shm=false \
			2>/dev/null | grep -q '"errors":0' && break
		sleep 0.2
	done
	((i < 100)) || die "the cluster took no put within 60 s (see $RAW/cluster-*.log)"
	log "kvtier cluster at $CMASTER"
	tcp_rows "$CMASTER" "$RAW/kvtier-cluster.jsonl" store "${CLUSTER_SIZE_LIST[@]}"
	stop_pid "$CA_PID"
	stop_pid "$CM_PID"
fi

# --- raw loopback TCP (Go) and memcpy -------------------------------------------------
for size in "${SIZE_LIST[@]}"; do
	log "memcpy size $size"
	"$BIN" bench --baseline memcpy --json --size "$size" --duration "${DURATION}s" >>"$RAW/baselines.jsonl"
	for c in "${CLIENT_LIST[@]}"; do
		log "raw TCP size $size connections $c"
		"$BIN" bench --baseline tcp --json --size "$size" --concurrency "$c" --duration "${DURATION}s" >>"$RAW/baselines.jsonl"
		log "raw TCP to another process, size $size connections $c"
		"$BIN" bench --baseline tcp-process --json --size "$size" --concurrency "$c" --duration "${DURATION}s" >>"$RAW/baselines.jsonl"
	done
done

# --- iperf3 ---------------------------------------------------------------------------
if have iperf3; then
	for streams in 1 4; do
		port=$(free_port)
		start_bg "$WORK/iperf3-server.log" iperf3 -s -1 -B 127.0.0.1 -p "$port"
		wait_port "$port" "$BG_PID" || die "iperf3 server did not start"
		log "iperf3 -l 1M -P $streams"
		iperf3 -c 127.0.0.1 -p "$port" -l 1M -P "$streams" -t "$DURATION" -J >"$RAW/iperf3-1M-$streams.json"
		stop_pid "$BG_PID"
	done
else
	skip iperf3 "skipped (not installed)"
fi

# --- Redis ----------------------------------------------------------------------------
if have redis-server && have redis-benchmark; then
	# A port another process took between free_port and the bind makes
	# redis-server exit: try another, three times.
	for try in 1 2 3; do
		port=$(free_port)
		start_bg "$RAW/redis-server.log" redis-server --save '' --appendonly no --bind 127.0.0.1 \
			--port "$port" --protected-mode no --maxmemory 0
		REDIS_PID=$BG_PID
		if wait_port "$port" "$REDIS_PID"; then
			break
		fi
		[ "$try" -lt 3 ] || die "redis-server did not start (see $RAW/redis-server.log)"
		log "redis-server did not start on port $port; trying another"
	done
	for size in "${SIZE_LIST[@]}"; do
		bytes=$(to_bytes "$size")
		for c in "${CLIENT_LIST[@]}"; do
			# About 1 GiB per test (at least 20 requests per client, at most 200k requests).
			n=$(((1 << 30) / bytes))
			((n < 20 * c)) && n=$((20 * c))
			((n > 200000)) && n=200000
			log "redis-benchmark set,get size $size clients $c requests $n"
			redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -d "$bytes" -c "$c" -n "$n" --csv \
				>"$RAW/redis-$bytes-$c.csv"
		done
	done
	stop_pid "$REDIS_PID"
else
	skip redis "skipped (not installed)"
fi

# --- fio on the SSD directory -----------------------------------------------------------
if have fio; then
	for rw in write read; do
		log "fio seq-$rw 1 MiB direct=1 in $SSD_DIR"
		fio --name="seq-$rw" --filename="$SSD_DIR/fio-bench.dat" --rw="$rw" --bs=1M --size=1G --direct=1 \
			--ioengine=psync --runtime="$DURATION" --time_based=0 --output-format=json >"$RAW/fio-seq-$rw.json"
	done
	rm -f "$SSD_DIR/fio-bench.dat"
else
	skip fio "skipped (not installed)"
fi

# --- report -----------------------------------------------------------------------------
"$BIN" bench --report "$OUT"
log "wrote $OUT/results.md, $OUT/results.json, $OUT/throughput.svg"
cat "$OUT/results.md"
