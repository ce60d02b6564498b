package target_test

import (
	"bytes"
	"fmt"

	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
)

// comparePDU compares SPDK's reply exp with ours. Fields that legitimately
// differ between two controllers are masked; each mask is listed here:
//
//   - R2T TTAG: controller-chosen tag.
//   - Connect CQE DW0: the CNTLID each target assigned.
//   - CQE SQID: SPDK leaves it 0 on I/O queues; we set the queue ID (as the
//     spec and Linux nvmet do).
//   - CQE SQHD: both targets advance it per completion, so it depends on the
//     order in which concurrently outstanding commands complete.
//   - Property Get VS: SPDK claims NVMe 2.0, we claim 1.3.
//   - Identify Controller: only SN, MN, SUBNQN, CNTRLTYPE, MDTS, SQES, CQES,
//     MAXCMD, KAS (I/O controllers), IOCCSZ, IORCSZ, ICDOFF, FCATT, MSDBD and
//     SGLS bits 1:0 are compared; vendor IDs, firmware revision, optional
//     capability bits (OACS, ONCS, CMIC, OAES, LPA, ...), CNTLID and NN (SPDK
//     reports max_namespaces 32, we the namespace count) differ by design.
//   - Identify Namespace: NSZE, NCAP, NLBAF, FLBAS and LBAF0 are compared;
//     NGUID/EUI64/feature bits differ (SPDK's NGUID is per bdev).
//   - Identify NS descriptor list (CNS 3) and I/O command set data (CNS 6):
//     identifiers and SPDK limits differ; only the length is compared.
//   - Get Log Page SMART / firmware / effects / error: contents depend on the
//     device's history and firmware; only the length is compared.
//   - Discovery log: GENCTR, PORTID and TRSVCID (our listener port) masked.
//   - Get Features (all FIDs): current values are implementation choices
//     (arbitration, power state, temperature threshold, error recovery);
//     the status is compared, DW0 only for Number of Queues and Keep Alive
//     Timer, which both targets must report identically.
func comparePDU(exp, got []byte, ci cmdInfo) (diffs []string, masked bool) {
	if !bytes.Equal(exp[:8], got[:8]) {
		return []string{fmt.Sprintf("common header ours %x, SPDK %x", got[:8], exp[:8])}, false
	}
	me, err := pdu.Decode(exp)
	if err != nil {
		return []string{fmt.Sprintf("SPDK PDU does not decode: %v", err)}, false
	}
	mg, err := pdu.Decode(got)
	if err != nil {
		return []string{fmt.Sprintf("our PDU does not decode (digest?): %v", err)}, false
	}
	switch e := me.(type) {
	case *pdu.R2T:
		g := mg.(*pdu.R2T)
		g.TTAG = e.TTAG
		if *g != *e {
			diffs = append(diffs, fmt.Sprintf("R2T ours %+v, SPDK %+v", *g, *e))
		}
		return diffs, true
	case *pdu.CapsuleResp:
		g := mg.(*pdu.CapsuleResp).Cpl
		x := e.Cpl
		g.SQID = x.SQID // SPDK leaves SQID 0 on I/O queues; we (like Linux nvmet) set the queue's ID
		g.SQHD = x.SQHD // depends on the completion order of concurrent commands
		switch {
		case ci.opcode == nvme.OpcodeFabrics && ci.fctype == nvme.FabricsConnect:
			g.DW0, masked = x.DW0, true
		case ci.opcode == nvme.OpcodeFabrics && ci.fctype == nvme.FabricsPropGet && ci.ofst == nvme.PropVS:
			g.DW0, masked = x.DW0, true
		case ci.opcode == nvme.AdminGetFeatures && ci.fid != nvme.FeatNumQueues && ci.fid != nvme.FeatKeepAlive:
			g.DW0, g.DW1, masked = x.DW0, x.DW1, true
		}
		if g != x {
			diffs = append(diffs, fmt.Sprintf("CQE ours %+v, SPDK %+v (command %+v)", g, x, ci))
		}
		return diffs, masked
	case *pdu.C2HData:
		g := mg.(*pdu.C2HData)
		if g.CCCID != e.CCCID || g.DATAO != e.DATAO || g.Last != e.Last || g.Success != e.Success || len(g.Data) != len(e.Data) {
			return []string{fmt.Sprintf("C2HData header ours %d/%d/%v/%v/%d, SPDK %d/%d/%v/%v/%d", g.CCCID, g.DATAO, g.Last, g.Success, len(g.Data),
				e.CCCID, e.DATAO, e.Last, e.Success, len(e.Data))}, false
		}
		a, b := append([]byte(nil), e.Data...), append([]byte(nil), g.Data...)
		masked = maskData(ci, a, b)
		if !bytes.Equal(a, b) {
			i := 0
			for i < len(a) && a[i] == b[i] {
				i++
			}
			diffs = append(diffs, fmt.Sprintf("data differs at byte %d (ours %x, SPDK %x; command %+v)", i, b[i:min(i+16, len(b))], a[i:min(i+16, len(a))], ci))
		}
		return diffs, masked
	}
	if !bytes.Equal(exp, got) {
		diffs = append(diffs, fmt.Sprintf("ours %x, SPDK %x", got, exp))
	}
	return diffs, false
}

// keep copies the listed [off, off+n) ranges of a into b... inverted: it
// zeroes everything in both except the ranges to compare.
func keepOnly(a, b []byte, ranges ...[2]int) {
	mask := make([]bool, len(a))
	for _, r := range ranges {
		for i := r[0]; i < r[0]+r[1] && i < len(mask); i++ {
			mask[i] = true
		}
	}
	for i := range mask {
		if !mask[i] {
			a[i], b[i] = 0, 0
		}
	}
}

func maskData(ci cmdInfo, a, b []byte) bool {
	switch ci.opcode {
	case nvme.AdminIdentify:
		switch ci.cns {
		case 1:
			kas := [2]int{320, 2}
			if len(a) > 111 && a[111] == nvme.CtrlTypeDiscovery {
				kas = [2]int{} // SPDK's discovery controller reports KAS 0, ours the real granularity
			}
			keepOnly(a, b, [2]int{4, 20}, [2]int{24, 40}, [2]int{77, 1}, [2]int{111, 1}, kas, [2]int{512, 2},
				[2]int{514, 2}, [2]int{768, 256}, [2]int{1792, 12})
			if len(a) > 536 {
				a[536] &= 3
				b[536] &= 3
			}
			return true
		case 0:
			keepOnly(a, b, [2]int{0, 16}, [2]int{25, 2}, [2]int{128, 4})
			return true
		case 2:
			return false
		default:
			keepOnly(a, b)
			return true
		}
	case nvme.AdminGetLogPage:
		if ci.lid == nvme.LogDiscovery {
			for _, p := range [][]byte{a, b} {
				clear(p[0:min(8, len(p))]) // GENCTR
				for off := nvme.DiscoveryHeaderLen; off+nvme.DiscoveryEntryLen <= len(p); off += nvme.DiscoveryEntryLen {
					clear(p[off+4 : off+6])   // PORTID
					clear(p[off+32 : off+64]) // TRSVCID
				}
			}
			return true
		}
		keepOnly(a, b)
		return true
	}
	return false
}
