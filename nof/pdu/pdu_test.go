package pdu_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/nof/pdu"
)

func TestCRC32CVectors(t *testing.T) {
	if got := pdu.CRC32C([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("CRC32C(123456789) = %08x", got)
	}
	// R2T from perf-digest-write-16k.pcap frame 50 (NVME-TCP-AND-SPDK-RPC.md §4.2).
	r2t := &pdu.R2T{CCCID: 0, TTAG: 2, R2TO: 0, R2TL: 16384}
	b := r2t.AppendPDU(nil, pdu.Options{HDGST: true})
	want := []byte{0x09, 0x01, 0x18, 0x00, 0x1c, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0xf2, 0xe1, 0x7e, 0x79}
	if !bytes.Equal(b, want) {
		t.Fatalf("R2T = %x, want %x", b, want)
	}
	resp := &pdu.CapsuleResp{Cpl: pdu.Completion{DW0: 0x20000, SQHD: 2}}
	b = resp.AppendPDU(nil, pdu.Options{HDGST: true})
	if !bytes.Equal(b[24:], []byte{0x59, 0x42, 0x75, 0xb3}) {
		t.Fatalf("CapsuleResp digest %x", b[24:])
	}
}

func TestEncodeLayout(t *testing.T) {
	cmd := &pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: 1, Flags: 0x40, CID: 7, SGL: pdu.SGL{Len: 4096, Type: pdu.SGLInCapsule}}, Data: make([]byte, 4096)}
	b := cmd.AppendPDU(nil, pdu.Options{HDGST: true, DDGST: true})
	h := pdu.ParseHeader(b)
	if h.Flags != 0x03 || h.HLEN != 72 || h.PDO != 76 || h.PLEN != 4176 || len(b) != 4176 {
		t.Fatalf("in-capsule write header %+v len %d (want flags 3, pdo 76, plen 4176 as in the SPDK capture)", h, len(b))
	}
	// CPDA 3 → 16-byte alignment: PDO 80 with 4 pad bytes.
	b = cmd.AppendPDU(nil, pdu.Options{HDGST: true, PDA: 3})
	if h = pdu.ParseHeader(b); h.PDO != 80 || h.PLEN != 80+4096 {
		t.Fatalf("aligned header %+v", h)
	}
	term := &pdu.TermReq{FES: 1, FEI: 8, Data: make([]byte, 200)}
	b = term.AppendPDU(nil, pdu.Options{HDGST: true})
	if h = pdu.ParseHeader(b); h.Type != pdu.TypeC2HTermReq || h.PLEN != 152 || h.PDO != 0 || h.Flags != 0 {
		t.Fatalf("term req header %+v", h)
	}
}

type errCase struct {
	name  string
	side  pdu.Side
	neg   *pdu.Options
	bytes func() []byte
	field string
	fes   uint16
	fei   uint32
}

func TestReaderValidation(t *testing.T) {
	dig := &pdu.Options{HDGST: true, DDGST: true}
	none := &pdu.Options{}
	capsule := func(o pdu.Options, data int) []byte {
		return (&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: 1}, Data: make([]byte, data)}).AppendPDU(nil, o)
	}
	cases := []errCase{
		{"unknown type", pdu.ControllerSide, none, func() []byte { b := capsule(pdu.Options{}, 0); b[0] = 0x0B; return b }, "type", 1, 0},
		{"controller type from host", pdu.ControllerSide, none, func() []byte { return (&pdu.R2T{}).AppendPDU(nil, pdu.Options{}) }, "type", 1, 0},
		{"capsule before ICReq", pdu.ControllerSide, nil, func() []byte { return capsule(pdu.Options{}, 0) }, "type", 2, 0},
		{"second ICReq", pdu.ControllerSide, none, func() []byte { return (&pdu.ICReq{}).AppendPDU(nil, pdu.Options{}) }, "type", 2, 0},
		{"bad hlen", pdu.ControllerSide, none, func() []byte { b := capsule(pdu.Options{}, 0); b[2] = 70; return b }, "hlen", 1, 2},
		{"ICReq plen", pdu.ControllerSide, nil, func() []byte { b := (&pdu.ICReq{}).AppendPDU(nil, pdu.Options{}); b[4] = 129; return b }, "plen", 1, 4},
		{"ICReq pfv", pdu.ControllerSide, nil, func() []byte { return (&pdu.ICReq{PFV: 1}).AppendPDU(nil, pdu.Options{}) }, "pfv", 1, 8},
		{"ICReq hpda", pdu.ControllerSide, nil, func() []byte { return (&pdu.ICReq{HPDA: 32}).AppendPDU(nil, pdu.Options{}) }, "pda", 1, 10},
		{"missing hdgst flag", pdu.ControllerSide, dig, func() []byte { return capsule(pdu.Options{}, 0) }, "flags", 1, 1},
		{"plen too large", pdu.ControllerSide, none, func() []byte {
			b := capsule(pdu.Options{}, 16)
			binary.LittleEndian.PutUint32(b[4:], 1<<30)
			return b
		}, "plen", 1, 4},
		{"pdo inside header", pdu.ControllerSide, none, func() []byte { b := capsule(pdu.Options{}, 16); b[3] = 40; return b }, "pdo", 1, 3},
		{"pdo misaligned", pdu.ControllerSide, &pdu.Options{PDA: 3}, func() []byte { return capsule(pdu.Options{}, 16) }, "pdo", 1, 3},
		{"header digest", pdu.ControllerSide, dig, func() []byte { b := capsule(*dig, 0); b[72] ^= 1; return b }, "hdgst", 3, 0},
		{"data digest", pdu.ControllerSide, dig, func() []byte { b := capsule(*dig, 64); b[len(b)-1] ^= 1; return b }, "ddgst", 3, 0},
		{"H2CData datal", pdu.ControllerSide, none, func() []byte {
			b := (&pdu.H2CData{Data: make([]byte, 8)}).AppendPDU(nil, pdu.Options{})
			b[16] = 9
			return b
		}, "datal", 1, 16},
		{"H2CData over MAXH2CDATA", pdu.ControllerSide, none, func() []byte {
			return (&pdu.H2CData{Data: make([]byte, 256<<10)}).AppendPDU(nil, pdu.Options{})
		}, "datal", 5, 16},
		{"R2T plen", pdu.HostSide, none, func() []byte {
			b := (&pdu.R2T{}).AppendPDU(nil, pdu.Options{})
			b[4] = 28
			return append(b, 0, 0, 0, 0)
		}, "plen", 1, 4},
		{"success without last", pdu.HostSide, none, func() []byte {
			b := (&pdu.C2HData{Data: make([]byte, 4)}).AppendPDU(nil, pdu.Options{})
			b[1] = pdu.FlagSuccess
			return b
		}, "flags", 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := pdu.NewReader(bytes.NewReader(c.bytes()), pdu.ReaderConfig{Side: c.side})
			if c.neg != nil {
				r.SetNegotiated(*c.neg)
			}
			f, err := r.Next()
			if err == nil && f.DataLen > 0 {
				_, err = r.Data()
			}
			var pe *pdu.Error
			if !errors.As(err, &pe) {
				t.Fatalf("want *pdu.Error, got %v", err)
			}
			if pe.Field != c.field || pe.FES != c.fes || pe.FEI != c.fei {
				t.Fatalf("got field %s FES %d FEI %d (%v), want %s %d %d", pe.Field, pe.FES, pe.FEI, pe, c.field, c.fes, c.fei)
			}
			if len(pe.Header) < 8 || pe.Header[0] != c.bytes()[0] {
				t.Fatalf("error header copy %x", pe.Header)
			}
			tr := pdu.TermReqFor(pe, false)
			b := tr.AppendPDU(nil, pdu.Options{})
			if h := pdu.ParseHeader(b); h.Type != pdu.TypeC2HTermReq || int(h.PLEN) != 24+len(pe.Header) {
				t.Fatalf("term req %+v", h)
			}
			if (c.field == "hdgst" || c.field == "ddgst") != errors.Is(err, pdu.ErrDigest) {
				t.Fatalf("errors.Is(ErrDigest) wrong for %s", c.field)
			}
		})
	}
}

// TestReaderStream reads a sequence of PDUs, some with data read into a
// caller buffer, some skipped.
func TestReaderStream(t *testing.T) {
	o := pdu.Options{HDGST: true, DDGST: true}
	var b []byte
	b = (&pdu.ICReq{DGST: 3}).AppendPDU(b, o)
	b = (&pdu.CapsuleCmd{Cmd: pdu.Command{CID: 1}, Data: bytes.Repeat([]byte{1}, 100)}).AppendPDU(b, o)
	b = (&pdu.H2CData{CCCID: 1, TTAG: 5, DATAO: 4096, Last: true, Data: bytes.Repeat([]byte{2}, 4096)}).AppendPDU(b, o)
	b = (&pdu.CapsuleCmd{Cmd: pdu.Command{CID: 2}}).AppendPDU(b, o)
	r := pdu.NewReader(bytes.NewReader(b), pdu.ReaderConfig{Side: pdu.ControllerSide})
	f, err := r.Next()
	if err != nil || f.Type != pdu.TypeICReq || f.ICReq().DGST != 3 {
		t.Fatalf("icreq %v %v", f, err)
	}
	r.SetNegotiated(o)
	if f, err = r.Next(); err != nil || f.Command().CID != 1 || f.DataLen != 100 {
		t.Fatalf("cmd %v", err)
	}
	// skip its data
	if f, err = r.Next(); err != nil || f.Type != pdu.TypeH2CData {
		t.Fatalf("h2c %v", err)
	}
	cccid, ttag, datao, datal := f.DataHeader()
	dst := make([]byte, datal)
	if err := r.ReadData(dst); err != nil || cccid != 1 || ttag != 5 || datao != 4096 || dst[4095] != 2 {
		t.Fatalf("h2c data %v", err)
	}
	if f, err = r.Next(); err != nil || f.Command().CID != 2 || f.DataLen != 0 {
		t.Fatalf("cmd2 %v", err)
	}
	if _, err = r.Next(); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
}

// TestWriterConcurrent sends from many goroutines and checks every PDU
// arrives intact.
func TestWriterConcurrent(t *testing.T) {
	pr, pw := io.Pipe()
	w := pdu.NewWriter(pw)
	w.SetOptions(pdu.Options{HDGST: true, DDGST: true})
	const n, per = 8, 200
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if err := w.Send(&pdu.C2HData{CCCID: uint16(g), DATAO: uint32(i), Last: true, Data: bytes.Repeat([]byte{byte(g)}, 512+i*97)}); err != nil { // from 16 KiB on, data is written by reference
					t.Error(err)
					return
				}
			}
		}(g)
	}
	go func() { wg.Wait(); pw.Close() }()
	r := pdu.NewReader(pr, pdu.ReaderConfig{Side: pdu.HostSide})
	r.SetNegotiated(pdu.Options{HDGST: true, DDGST: true})
	next := make([]uint32, n)
	for k := 0; k < n*per; k++ {
		f, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		cccid, _, datao, datal := f.DataHeader()
		d, err := r.Data()
		if err != nil || int(datal) != 512+int(datao)*97 || d[0] != byte(cccid) || d[len(d)-1] != byte(cccid) || next[cccid] != datao {
			t.Fatalf("pdu %d: cccid %d datao %d datal %d err %v", k, cccid, datao, datal, err)
		}
		next[cccid]++
	}
}

func FuzzDecode(f *testing.F) {
	o := pdu.Options{HDGST: true, DDGST: true}
	f.Add((&pdu.ICReq{DGST: 3}).AppendPDU(nil, o))
	f.Add((&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: 1}, Data: []byte("abcd")}).AppendPDU(nil, o))
	f.Add((&pdu.H2CData{Data: []byte("abcdefgh"), Last: true}).AppendPDU(nil, o))
	f.Add((&pdu.C2HData{Data: []byte("abcdefgh"), Last: true, Success: true}).AppendPDU(nil, pdu.Options{}))
	f.Add((&pdu.R2T{R2TL: 5}).AppendPDU(nil, o))
	f.Add((&pdu.TermReq{FES: 1, Data: []byte{1, 2, 3}}).AppendPDU(nil, o))
	f.Add((&pdu.CapsuleResp{}).AppendPDU(nil, o))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := pdu.Decode(b)
		if err != nil {
			return
		}
		// A decoded PDU re-encodes to something that decodes to the same value.
		re := m.AppendPDU(nil, pdu.OptionsOf(b))
		m2, err := pdu.Decode(re)
		if err != nil {
			t.Fatalf("re-encoded PDU does not decode: %v", err)
		}
		if !reflect.DeepEqual(normalize(m), normalize(m2)) {
			t.Fatalf("round trip changed %#v to %#v", m, m2)
		}
	})
}

func normalize(m pdu.Message) pdu.Message {
	switch v := m.(type) {
	case *pdu.TermReq:
		c := *v
		if len(c.Data) == 0 {
			c.Data = nil
		}
		return &c
	case *pdu.CapsuleCmd:
		c := *v
		if len(c.Data) == 0 {
			c.Data = nil
		}
		return &c
	}
	return m
}

func FuzzReaderControllerSide(f *testing.F) {
	o := pdu.Options{HDGST: true}
	var seed []byte
	seed = (&pdu.ICReq{DGST: 1}).AppendPDU(seed, o)
	seed = (&pdu.CapsuleCmd{Cmd: pdu.Command{Opcode: 1}, Data: []byte("abcd")}).AppendPDU(seed, o)
	seed = (&pdu.H2CData{Data: []byte("abcdefgh"), Last: true}).AppendPDU(seed, o)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		r := pdu.NewReader(bytes.NewReader(b), pdu.ReaderConfig{Side: pdu.ControllerSide})
		for i := 0; i < 64; i++ {
			r.NextBuffered() // must not panic or consume anything
			fr, err := r.Next()
			if err != nil {
				var pe *pdu.Error
				if errors.As(err, &pe) && (pe.FES == 0 || pe.FES > 6) {
					t.Fatalf("bad FES %d", pe.FES)
				}
				return
			}
			if fr.Type == pdu.TypeICReq {
				r.SetNegotiated(pdu.Options{HDGST: fr.ICReq().DGST&1 != 0})
			}
			if i%2 == 0 && fr.DataLen > 0 {
				if _, err := r.Data(); err != nil {
					return
				}
			}
		}
	})
}

// TestAppendC2HDataFill: the fill encoder produces exactly the bytes of
// C2HData.AppendPDU under every option (digests, data alignment), and a
// failing fill leaves the buffer as it was.
func TestAppendC2HDataFill(t *testing.T) {
	data := make([]byte, 5000)
	for i := range data {
		data[i] = byte(i * 13)
	}
	for _, o := range []pdu.Options{{}, {HDGST: true}, {DDGST: true}, {HDGST: true, DDGST: true, PDA: 3}, {PDA: 31}} {
		for _, success := range []bool{false, true} {
			want := (&pdu.C2HData{CCCID: 9, Last: true, Success: success, Data: data}).AppendPDU([]byte("x"), o)
			got, err := pdu.AppendC2HDataFill([]byte("x"), o, 9, true, success, len(data), func(b []byte) error { copy(b, data); return nil })
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("options %+v success %v: fill encoding differs (err %v)", o, success, err)
			}
			if _, err := pdu.Decode(got[1:]); err != nil {
				t.Fatalf("options %+v: %v", o, err)
			}
		}
	}
	b := []byte("keep")
	got, err := pdu.AppendC2HDataFill(b, pdu.Options{}, 1, true, false, 4096, func([]byte) error { return io.ErrUnexpectedEOF })
	if err == nil || string(got) != "keep" {
		t.Fatalf("failed fill: %q, %v", got, err)
	}
}
