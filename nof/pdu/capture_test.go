package pdu_test

import (
	"bytes"
	"encoding/binary"
	"github.com/kvtier/kvtier/internal/shared"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/nof/internal/pcapio"
	"github.com/kvtier/kvtier/nof/pdu"
)

var vectors = shared.Path("nvme-tcp-vectors")

// capturedPDU is one PDU cut out of a reassembled capture stream.
type capturedPDU struct {
	conn  int
	dir   int // 0 host→controller, 1 controller→host
	frame int // frame in which its last byte arrived
	off   int
	raw   []byte
}

func capturePDUs(t testing.TB, path string) []capturedPDU {
	t.Helper()
	conns, err := pcapio.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []capturedPDU
	for _, c := range conns {
		for dir := 0; dir < 2; dir++ {
			s := c.Stream[dir]
			for off := 0; off < len(s); {
				if len(s)-off < 8 {
					t.Fatalf("%s stream %d dir %d: %d trailing bytes", path, c.Index, dir, len(s)-off)
				}
				plen := int(binary.LittleEndian.Uint32(s[off+4:]))
				if plen < 8 || off+plen > len(s) {
					t.Fatalf("%s stream %d dir %d: bad plen %d at %d", path, c.Index, dir, plen, off)
				}
				out = append(out, capturedPDU{conn: c.Index, dir: dir, frame: c.FrameAt(dir, off+plen-1), off: off, raw: s[off : off+plen]})
				off += plen
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].frame != out[j].frame {
			return out[i].frame < out[j].frame
		}
		return out[i].off < out[j].off
	})
	return out
}

func captureFiles(t testing.TB) []string {
	files, _ := filepath.Glob(filepath.Join(vectors, "pcap", "*.pcap"))
	if len(files) == 0 {
		t.Skipf("no captures under %s", vectors)
	}
	return files
}

// TestCaptureRoundTrip decodes every PDU of every capture and re-encodes it
// byte for byte, verifying every digest on the way.
func TestCaptureRoundTrip(t *testing.T) {
	total, digests := 0, 0
	for _, f := range captureFiles(t) {
		pdus := capturePDUs(t, f)
		if len(pdus) == 0 {
			t.Fatalf("%s: no PDUs", f)
		}
		for _, p := range pdus {
			m, err := pdu.Decode(p.raw)
			if err != nil {
				t.Fatalf("%s frame %d: decode: %v", filepath.Base(f), p.frame, err)
			}
			re := m.AppendPDU(nil, pdu.OptionsOf(p.raw))
			if !bytes.Equal(re, p.raw) {
				t.Fatalf("%s frame %d %v: re-encode differs\n got %x\nwant %x", filepath.Base(f), p.frame, m.PDUType(), head(re), head(p.raw))
			}
			if p.raw[1]&pdu.FlagHDGST != 0 {
				digests++
			}
			total++
		}
	}
	t.Logf("%d PDUs round-tripped, %d with header digests", total, digests)
	if digests < 190 {
		t.Fatalf("expected at least 190 header digests as tshark counted, got %d", digests)
	}
}

func head(b []byte) []byte {
	if len(b) > 96 {
		return b[:96]
	}
	return b
}

// TestCaptureMatchesTshark compares our decoded common-header fields with
// tshark's decoded/*.pdus.tsv, PDU by PDU, frame by frame.
func TestCaptureMatchesTshark(t *testing.T) {
	for _, f := range captureFiles(t) {
		name := strings.TrimSuffix(filepath.Base(f), ".pcap")
		tsv, err := os.ReadFile(filepath.Join(vectors, "decoded", name+".pdus.tsv"))
		if err != nil {
			t.Logf("%s: no tsv: %v", name, err)
			continue
		}
		type row struct {
			frame, stream               int
			typ, flags, hlen, pdo, plen string
			hdgstStatus, ddgstStatus    string
		}
		var rows []row
		for i, line := range strings.Split(strings.TrimSpace(string(tsv)), "\n") {
			if i == 0 {
				continue
			}
			c := strings.Split(line, "\t")
			fr, _ := strconv.Atoi(c[0])
			st, _ := strconv.Atoi(c[2])
			types := strings.Split(c[5], ",")
			hs, ds := strings.Split(c[10], ","), strings.Split(c[11], ",")
			for k := range types {
				r := row{frame: fr, stream: st, typ: types[k], flags: strings.Split(c[6], ",")[k],
					hlen: strings.Split(c[7], ",")[k], pdo: strings.Split(c[8], ",")[k], plen: strings.Split(c[9], ",")[k]}
				if c[10] != "" && k < len(hs) {
					r.hdgstStatus = hs[k]
				}
				if c[11] != "" && k < len(ds) {
					r.ddgstStatus = ds[k]
				}
				rows = append(rows, r)
			}
		}
		var pdus []capturedPDU
		for _, p := range capturePDUs(t, f) {
			// identify.pcap frame 39 (completion of Get Features FID 0x01) hits
			// the Wireshark 4.0.17 "Unregistered hf" dissector bug: tshark
			// stops decoding that frame after its first CQE: the second CQE
			// (Keep Alive's) is missing from the tsv (see the vectors' README).
			if name == "identify" && p.frame == 39 && len(pdus) > 0 && pdus[len(pdus)-1].frame == 39 {
				continue
			}
			pdus = append(pdus, p)
		}
		for i, p := range pdus {
			if i >= len(rows) {
				t.Fatalf("%s: %d PDUs, tshark listed %d", name, len(pdus), len(rows))
			}
			h := pdu.ParseHeader(p.raw)
			r := rows[i]
			got := []string{strconv.Itoa(p.frame), strconv.Itoa(p.conn), strconv.Itoa(int(h.Type)),
				"0x" + strconv.FormatUint(uint64(h.Flags)|0x100, 16)[1:], strconv.Itoa(int(h.HLEN)), strconv.Itoa(int(h.PDO)), strconv.Itoa(int(h.PLEN))}
			want := []string{strconv.Itoa(r.frame), strconv.Itoa(r.stream), r.typ, r.flags, r.hlen, r.pdo, r.plen}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("%s PDU %d: ours %v, tshark %v", name, i, got, want)
			}
			if (r.hdgstStatus != "") != (h.Flags&pdu.FlagHDGST != 0) || (r.hdgstStatus != "" && r.hdgstStatus != "1") {
				t.Fatalf("%s PDU %d: hdgst status %q flags 0x%02x", name, i, r.hdgstStatus, h.Flags)
			}
			if r.ddgstStatus != "" && r.ddgstStatus != "1" {
				t.Fatalf("%s PDU %d: ddgst status %q", name, i, r.ddgstStatus)
			}
		}
		if len(pdus) != len(rows) {
			t.Fatalf("%s: %d PDUs, tshark listed %d", name, len(pdus), len(rows))
		}
	}
}
