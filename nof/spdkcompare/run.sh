#!/usr/bin/env bash
# Measure kvtier's NVMe/TCP target and initiator beside SPDK's, same run
# (issue #18). Usage:
#
#   nof/spdkcompare/run.sh SPDK_DIR [OUT_DIR]
#
# SPDK_DIR is a built SPDK tree (v26.05: build/bin/nvmf_tgt,
# build/bin/spdk_nvme_perf, scripts/rpc.py); SPDK is never part of this
# repository. Needs root (hugepages) and two CPUs: the target under test
# runs on TGT_CORE (SPDK's nvmf_tgt with -m, ours with taskset, so one Go
# P), the host (spdk_nvme_perf -c, or `kvtier nvme perf` under taskset) on
# HOST_CORE. Only one target runs at a time (nvmf_tgt polls its core even
# when idle), started afresh for each case; the two targets alternate case
# by case (SPDK first in odd runs, kvtier first in even ones) so load from
# elsewhere falls on both alike.
#
# Environment: RUNS [2], SECS per measurement [10], CASES (names below)
# [all], FILE_NS=1 also compares our file namespace with SPDK's aio bdev on
# the same kind of file (FILE_DIR [/var/tmp], size 1 GiB), TGT_CORE [0],
# HOST_CORE [1], PORT [4420], SPDK_ARGS (more nvmf_tgt arguments, e.g.
# --interrupt-mode, SPDK's setting for a core it shares) [none], NICE (a niceness for targets and hosts alike,
# e.g. -10 on a machine shared with other work: a polling SPDK that
# shares its core with other runnable tasks loses whole time slices, and its
# figures then swing by 10 x between runs) [none]. Output: one line per measurement
# "RESULT run target host case iops mibps lat_us" (lat_us: spdk_nvme_perf's
# maximum latency, our perf's p99), then a table of the ratios (kvtier /
# SPDK, per run) with spdk_nvme_perf's maximum latency against each target
# (stalls of the machine show there first) on stdout; logs in OUT_DIR.
set -euo pipefail

SPDK=${1:?usage: run.sh SPDK_DIR [OUT_DIR]}
OUT=${2:-$(mktemp -d /tmp/spdkcompare.XXXXXX)}
RUNS=${RUNS:-2}
SECS=${SECS:-10}
TGT_CORE=${TGT_CORE:-0}
HOST_CORE=${HOST_CORE:-1}
PORT=${PORT:-4420}
FILE_NS=${FILE_NS:-0}
FILE_DIR=${FILE_DIR:-/var/tmp}
PRIO=()
[[ -n ${NICE:-} ]] && PRIO=(nice -n "$NICE")
NQN=nqn.2016-06.io.spdk:cnode1
SOCK=$OUT/spdk.sock
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

PERF=$SPDK/build/bin/spdk_nvme_perf
TGT=$SPDK/build/bin/nvmf_tgt
RPC=$SPDK/scripts/rpc.py
for f in "$PERF" "$TGT" "$RPC"; do
	[[ -x $f ]] || { echo "run.sh: $f missing: build SPDK first" >&2; exit 2; }
done
mkdir -p "$OUT"
echo "logs in $OUT" >&2

# Hugepages for DPDK (2 MiB pages).
if [[ $(cat /proc/sys/vm/nr_hugepages) -lt 1024 ]]; then
	echo 1024 > /proc/sys/vm/nr_hugepages
fi
mountpoint -q /dev/hugepages || { mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages; }

(cd "$REPO" && go build -o "$OUT/ktgt" ./nof/spdkcompare/ktgt && go build -o "$OUT/kvtier" ./cmd/kvtier)

# name | spdk_nvme_perf workload | kvtier nvme perf workload ("" = not comparable)
ALL_CASES="r4k w4k rw4k r128k w128k r4k-dgst r128k-dgst"
CASES=${CASES:-$ALL_CASES}
perf_args() {
	case $1 in
	r4k) echo "-q 32 -o 4096 -w randread" ;;
	w4k) echo "-q 32 -o 4096 -w randwrite" ;;
	rw4k) echo "-q 32 -o 4096 -w randrw -M 70" ;;
	r128k) echo "-q 8 -o 131072 -w read" ;;
	w128k) echo "-q 8 -o 131072 -w write" ;;
	r4k-dgst) echo "-q 32 -o 4096 -w randread -H -I" ;;
	r128k-dgst) echo "-q 8 -o 131072 -w read -H -I" ;;
	*) echo "unknown case $1" >&2; exit 2 ;;
	esac
}
ours_args() {
	case $1 in
	r4k) echo "--rw randread --bs 4096 --qd 32" ;;
	w4k) echo "--rw randwrite --bs 4096 --qd 32" ;;
	r128k) echo "--rw read --bs 131072 --qd 8" ;;
	w128k) echo "--rw write --bs 131072 --qd 8" ;;
	r4k-dgst) echo "--rw randread --bs 4096 --qd 32 --hdgst --ddgst" ;;
	r128k-dgst) echo "--rw read --bs 131072 --qd 8 --hdgst --ddgst" ;;
	*) echo "" ;;
	esac
}

TPID=""
stop_target() {
	if [[ -n $TPID ]]; then
		kill -INT "$TPID" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$TPID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$TPID" 2>/dev/null || true
		wait "$TPID" 2>/dev/null || true
		TPID=""
	fi
}
trap stop_target EXIT

rpc() { "$RPC" -s "$SOCK" "$@" > /dev/null; }

# start_spdk mem|file LOG
start_spdk() {
	rm -f "$SOCK"
	# shellcheck disable=SC2086
	"${PRIO[@]}" "$TGT" -m $((1 << TGT_CORE)) -r "$SOCK" ${SPDK_ARGS:-} > "$2" 2>&1 &
	TPID=$!
	for _ in $(seq 100); do [[ -S $SOCK ]] && break; sleep 0.1; done
	rpc framework_wait_init
	rpc nvmf_create_transport -t TCP
	if [[ $1 == mem ]]; then
		rpc bdev_malloc_create -b Malloc0 256 4096
		bdev=Malloc0
	else
		truncate -s 1G "$FILE_DIR/spdkcompare-aio.img"
		rpc bdev_aio_create "$FILE_DIR/spdkcompare-aio.img" Aio0 4096
		bdev=Aio0
	fi
	rpc nvmf_create_subsystem $NQN -a -s SPDK00000000000001
	rpc nvmf_subsystem_add_ns $NQN $bdev
	rpc nvmf_subsystem_add_listener $NQN -t tcp -a 127.0.0.1 -s "$PORT"
}

# start_kvtier mem|file LOG
start_kvtier() {
	local ns=(-mem 256MiB)
	[[ $1 == file ]] && ns=(-file "$FILE_DIR/spdkcompare-kvtier.img" -size 1GiB)
	"${PRIO[@]}" taskset -c "$TGT_CORE" "$OUT/ktgt" -addr 127.0.0.1:"$PORT" -nqn $NQN ${KTGT_ARGS:-} "${ns[@]}" > "$2" 2>&1 &
	TPID=$!
	for _ in $(seq 100); do grep -qs "^ready" "$2" && return; sleep 0.1; done
	echo "run.sh: kvtier target did not start: $(cat "$2")" >&2
	exit 1
}

TR="trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN"

# measure RUN TARGET NS CASE: spdk_nvme_perf, then (against SPDK's target
# only, or with OURS=1) our initiator.
measure() {
	local run=$1 tgt=$2 ns=$3 c=$4 log out iops mibps a
	{
		log=$OUT/run$run-$tgt-$ns-$c-spdkperf.log
		# shellcheck disable=SC2046
		"${PRIO[@]}" "$PERF" -c $((1 << HOST_CORE)) $(perf_args "$c") -t "$SECS" -r "$TR" > "$log" 2>&1 || true
		read -r iops mibps maxus < <(awk '/^Total/ {print $3, $4, $7}' "$log")
		echo "RESULT $run $tgt-$ns spdk_nvme_perf $c ${iops:-0} ${mibps:-0} ${maxus:-0}"
		a=$(ours_args "$c")
		if [[ -n $a && ($tgt == spdk || ${OURS:-0} == 1) ]]; then
			log=$OUT/run$run-$tgt-$ns-$c-kvtier.log
			# shellcheck disable=SC2086
			"${PRIO[@]}" taskset -c "$HOST_CORE" "$OUT/kvtier" nvme perf --target 127.0.0.1:"$PORT" --nqn $NQN --queues 1 $a \
				--duration "${SECS}s" --json > "$log" 2>&1 || true
			out=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["iops"], d["bytes"]/d["seconds"]/2**20, d["p99_us"])' "$log" 2>/dev/null || echo "0 0 0")
			echo "RESULT $run $tgt-$ns kvtier-perf $c $out"
		fi
	}
}

RESULTS=$OUT/results.txt
: > "$RESULTS"
nss=(mem)
[[ $FILE_NS == 1 ]] && nss+=(file)
for run in $(seq "$RUNS"); do
	order=(spdk kvtier)
	((run % 2 == 0)) && order=(kvtier spdk)
	for ns in "${nss[@]}"; do
		for c in $CASES; do
			for tgt in "${order[@]}"; do
				"start_$tgt" "$ns" "$OUT/run$run-$tgt-$ns-$c-target.log"
				measure "$run" "$tgt" "$ns" "$c" | tee -a "$RESULTS"
				stop_target
			done
		done
	done
done
rm -f "$FILE_DIR/spdkcompare-aio.img" "$FILE_DIR/spdkcompare-kvtier.img"

# Table: per run and case, kvtier's target / SPDK's target (both driven by
# spdk_nvme_perf) and our initiator / spdk_nvme_perf (both against SPDK's
# target).
python3 - "$RESULTS" <<'EOF'
import sys, collections
r = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 7 or f[0] != "RESULT":
        continue
    run, tgt, host, case, iops, mibps = f[1:7]
    lat = float(f[7]) if len(f) > 7 else 0.0
    r[(tgt.split("-")[1], case)][(run, tgt.split("-")[0], host)] = (float(iops), float(mibps), lat)
print(f"{'ns':5} {'case':11} {'run':3} {'SPDK tgt':>16} {'kvtier tgt':>16} {'ratio':>6}   {'our initiator':>16} {'ratio':>6}   max lat ms SPDK/kvtier tgt")
for (ns, case), d in sorted(r.items()):
    for run in sorted({k[0] for k in d}):
        s = d.get((run, "spdk", "spdk_nvme_perf"), (0, 0, 0))
        k = d.get((run, "kvtier", "spdk_nvme_perf"), (0, 0, 0))
        o = d.get((run, "spdk", "kvtier-perf"))
        big = "128k" in case
        fmt = (lambda v: f"{v[1]:9.0f} MiB/s") if big else (lambda v: f"{v[0]:10.0f} IOPS")
        idx = 1 if big else 0
        rat = lambda a, b: f"{a[idx] / b[idx]:6.2f}" if b[idx] else "   n/a"
        line = f"{ns:5} {case:11} {run:3} {fmt(s):>16} {fmt(k):>16} {rat(k, s)}"
        line += f"   {fmt(o):>16} {rat(o, s)}" if o else " " * 26
        line += f"   {s[2] / 1000:8.1f} / {k[2] / 1000:.1f}"
        print(line)
EOF
