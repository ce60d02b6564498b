package pcapio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
)

// Chunk is a contiguous piece of one direction's byte stream.
type Chunk struct {
	Frame  int // 1-based frame number it arrived in
	Offset int // offset in the direction's stream
	Data   []byte
}

// Conn is one reassembled TCP connection. Dir 0 is from the side that sent
// the first SYN (the client), Dir 1 the server's.
type Conn struct {
	Index      int // order of first appearance (tshark's tcp.stream)
	Client     netip.AddrPort
	Server     netip.AddrPort
	Stream     [2][]byte
	Chunks     [2][]Chunk
	nextSeq    [2]uint32
	haveSeq    [2]bool
	pending    [2]map[uint32]pend
	clientSeen bool
}

type pend struct {
	frame int
	data  []byte
}

// FrameAt returns the frame number in which byte off of direction dir
// arrived (0 if unknown).
func (c *Conn) FrameAt(dir, off int) int {
	ch := c.Chunks[dir]
	i := sort.Search(len(ch), func(i int) bool { return ch[i].Offset+len(ch[i].Data) > off })
	if i < len(ch) {
		return ch[i].Frame
	}
	return 0
}

// ReadFile reads a pcap or pcapng file and returns its TCP connections in
// order of first appearance.
func ReadFile(path string) ([]*Conn, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	frames, err := parseFrames(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	type key struct{ a, b netip.AddrPort }
	conns := map[key]*Conn{}
	var order []*Conn
	for i, fr := range frames {
		src, dst, seq, flags, payload, ok := parseTCP(fr.link, fr.data)
		if !ok {
			continue
		}
		c := conns[key{src, dst}]
		dir := 0
		if c == nil {
			if c = conns[key{dst, src}]; c != nil {
				dir = 1
			}
		}
		if c == nil {
			c = &Conn{Index: len(order), Client: src, Server: dst}
			c.pending = [2]map[uint32]pend{{}, {}}
			conns[key{src, dst}] = c
			order = append(order, c)
		}
		const syn = 0x02
		if flags&syn != 0 {
			c.nextSeq[dir] = seq + 1
			c.haveSeq[dir] = true
			continue
		}
		if len(payload) == 0 {
			continue
		}
		if !c.haveSeq[dir] {
			c.nextSeq[dir] = seq
			c.haveSeq[dir] = true
		}
		c.add(dir, i+1, seq, payload)
	}
	return order, nil
}

func (c *Conn) add(dir, frame int, seq uint32, p []byte) {
	c.pending[dir][seq] = pend{frame, append([]byte(nil), p...)}
	for {
		progressed := false
		for s, pd := range c.pending[dir] {
			d := int32(c.nextSeq[dir] - s) // bytes already consumed from this segment
			if d < 0 {
				continue
			}
			delete(c.pending[dir], s)
			if int(d) < len(pd.data) {
				data := pd.data[d:]
				c.Chunks[dir] = append(c.Chunks[dir], Chunk{Frame: pd.frame, Offset: len(c.Stream[dir]), Data: data})
				c.Stream[dir] = append(c.Stream[dir], data...)
				c.nextSeq[dir] += uint32(len(data))
			}
			progressed = true
		}
		if !progressed {
			return
		}
	}
}

type frame struct {
	link uint32
	data []byte
}

func parseFrames(b []byte) ([]frame, error) {
	if len(b) < 24 {
		return nil, errors.New("file too short")
	}
	switch binary.LittleEndian.Uint32(b) {
	case 0xA1B2C3D4, 0xA1B23C4D:
		return parsePcap(b, binary.LittleEndian)
	case 0xD4C3B2A1, 0x4D3CB2A1:
		return parsePcap(b, binary.BigEndian)
	case 0x0A0D0D0A:
		return parsePcapng(b)
	}
	return nil, errors.New("not a pcap or pcapng file")
}

func parsePcap(b []byte, bo binary.ByteOrder) ([]frame, error) {
	link := bo.Uint32(b[20:])
	var out []frame
	for off := 24; off+16 <= len(b); {
		incl := int(bo.Uint32(b[off+8:]))
		off += 16
		if incl < 0 || off+incl > len(b) {
			return nil, errors.New("truncated record")
		}
		out = append(out, frame{link, b[off : off+incl]})
		off += incl
	}
	return out, nil
}

func parsePcapng(b []byte) ([]frame, error) {
	var bo binary.ByteOrder = binary.LittleEndian
	var links []uint32
	var out []frame
	for off := 0; off+12 <= len(b); {
		typ := bo.Uint32(b[off:])
		if typ == 0x0A0D0D0A {
			if binary.LittleEndian.Uint32(b[off+8:]) == 0x1A2B3C4D {
				bo = binary.LittleEndian
			} else {
				bo = binary.BigEndian
			}
			links = nil
		}
		blen := int(bo.Uint32(b[off+4:]))
		if blen < 12 || off+blen > len(b) {
			return nil, fmt.Errorf("bad block length %d at %d", blen, off)
		}
		body := b[off+8 : off+blen-4]
		switch typ {
		case 1: // interface description
			links = append(links, uint32(bo.Uint16(body[0:])))
		case 6: // enhanced packet
			if len(body) < 20 {
				return nil, errors.New("short EPB")
			}
			ifc := int(bo.Uint32(body[0:]))
			capLen := int(bo.Uint32(body[12:]))
			if ifc >= len(links) || 20+capLen > len(body) {
				return nil, errors.New("bad EPB")
			}
			out = append(out, frame{links[ifc], body[20 : 20+capLen]})
		case 3: // simple packet
			if len(links) == 0 || len(body) < 4 {
				return nil, errors.New("bad SPB")
			}
			out = append(out, frame{links[0], body[4:]})
		}
		off += blen
	}
	return out, nil
}

// parseTCP extracts TCP fields from a link-layer frame.
func parseTCP(link uint32, d []byte) (src, dst netip.AddrPort, seq uint32, flags uint8, payload []byte, ok bool) {
	var ethType uint16
	switch link {
	case 1: // Ethernet
		if len(d) < 14 {
			return
		}
		ethType = binary.BigEndian.Uint16(d[12:])
		d = d[14:]
	case 113: // Linux cooked v1
		if len(d) < 16 {
			return
		}
		ethType = binary.BigEndian.Uint16(d[14:])
		d = d[16:]
	case 276: // Linux cooked v2
		if len(d) < 20 {
			return
		}
		ethType = binary.BigEndian.Uint16(d[0:])
		d = d[20:]
	case 0, 101: // null / raw IP
		if link == 0 {
			if len(d) < 4 {
				return
			}
			d = d[4:]
		}
		if len(d) > 0 && d[0]>>4 == 6 {
			ethType = 0x86DD
		} else {
			ethType = 0x0800
		}
	default:
		return
	}
	var sip, dip netip.Addr
	switch ethType {
	case 0x0800:
		if len(d) < 20 || d[9] != 6 {
			return
		}
		ihl := int(d[0]&0xF) * 4
		tot := int(binary.BigEndian.Uint16(d[2:]))
		if tot < ihl || tot > len(d) {
			tot = len(d)
		}
		sip = netip.AddrFrom4([4]byte(d[12:16]))
		dip = netip.AddrFrom4([4]byte(d[16:20]))
		d = d[ihl:tot]
	case 0x86DD:
		if len(d) < 40 || d[6] != 6 {
			return
		}
		pl := int(binary.BigEndian.Uint16(d[4:]))
		sip = netip.AddrFrom16([16]byte(d[8:24]))
		dip = netip.AddrFrom16([16]byte(d[24:40]))
		d = d[40:]
		if pl < len(d) {
			d = d[:pl]
		}
	default:
		return
	}
	if len(d) < 20 {
		return
	}
	doff := int(d[12]>>4) * 4
	if doff < 20 || doff > len(d) {
		return
	}
	src = netip.AddrPortFrom(sip, binary.BigEndian.Uint16(d[0:]))
	dst = netip.AddrPortFrom(dip, binary.BigEndian.Uint16(d[2:]))
	return src, dst, binary.BigEndian.Uint32(d[4:]), d[13], d[doff:], true
}

// Writer writes a classic pcap file of synthetic TCP connections.
type Writer struct {
	w   io.Writer
	err error
	ts  uint32
}

// NewWriter writes the pcap global header to w.
func NewWriter(w io.Writer) *Writer {
	pw := &Writer{w: w}
	var h [24]byte
	le := binary.LittleEndian
	le.PutUint32(h[0:], 0xA1B2C3D4)
	le.PutUint16(h[4:], 2)
	le.PutUint16(h[6:], 4)
	le.PutUint32(h[16:], 262144)
	le.PutUint32(h[20:], 1)
	_, pw.err = w.Write(h[:])
	return pw
}

// Err returns the first write error.
func (pw *Writer) Err() error { return pw.err }

// TCPConn is one synthetic connection in a Writer.
type TCPConn struct {
	pw       *Writer
	ep       [2]netip.AddrPort
	seq      [2]uint32
	finished bool
}

// NewConn starts a connection (SYN, SYN-ACK, ACK) from client to server.
func (pw *Writer) NewConn(client, server netip.AddrPort) *TCPConn {
	c := &TCPConn{pw: pw, ep: [2]netip.AddrPort{client, server}, seq: [2]uint32{1000, 5000}}
	c.frame(0, 0x02, nil)
	c.seq[0]++
	c.frame(1, 0x12, nil)
	c.seq[1]++
	c.frame(0, 0x10, nil)
	return c
}

// Data records p sent in direction dir (0 client→server, 1 server→client),
// split into segments of at most 32 KiB.
func (c *TCPConn) Data(dir int, p []byte) {
	for len(p) > 0 {
		n := min(len(p), 32<<10)
		c.frame(dir, 0x18, p[:n])
		c.seq[dir] += uint32(n)
		p = p[n:]
	}
}

func (c *TCPConn) frame(dir int, flags uint8, payload []byte) {
	pw := c.pw
	if pw.err != nil {
		return
	}
	src, dst := c.ep[dir], c.ep[1-dir]
	ipLen := 20 + 20 + len(payload)
	fr := make([]byte, 14+ipLen)
	fr[12], fr[13] = 0x08, 0x00
	ip := fr[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
	ip[6] = 0x40 // DF
	ip[8] = 64
	ip[9] = 6
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:20]))
	t := ip[20:]
	binary.BigEndian.PutUint16(t[0:], src.Port())
	binary.BigEndian.PutUint16(t[2:], dst.Port())
	binary.BigEndian.PutUint32(t[4:], c.seq[dir])
	if flags&0x10 != 0 {
		binary.BigEndian.PutUint32(t[8:], c.seq[1-dir])
	}
	t[12] = 5 << 4
	t[13] = flags
	binary.BigEndian.PutUint16(t[14:], 65535)
	copy(t[20:], payload)
	binary.BigEndian.PutUint16(t[16:], tcpChecksum(s4, d4, t))
	var rh [16]byte
	pw.ts++
	binary.LittleEndian.PutUint32(rh[0:], 1_700_000_000+pw.ts/1000)
	binary.LittleEndian.PutUint32(rh[4:], (pw.ts%1000)*1000)
	binary.LittleEndian.PutUint32(rh[8:], uint32(len(fr)))
	binary.LittleEndian.PutUint32(rh[12:], uint32(len(fr)))
	if _, err := pw.w.Write(rh[:]); err != nil {
		pw.err = err
		return
	}
	if _, err := pw.w.Write(fr); err != nil {
		pw.err = err
	}
}

func sum16(b []byte, s uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return ^uint16(s)
}

func ipChecksum(h []byte) uint16 { return fold(sum16(h, 0)) }

func tcpChecksum(src, dst [4]byte, seg []byte) uint16 {
	var ph [12]byte
	copy(ph[0:], src[:])
	copy(ph[4:], dst[:])
	ph[9] = 6
	binary.BigEndian.PutUint16(ph[10:], uint16(len(seg)))
	return fold(sum16(seg, sum16(ph[:], 0)))
}

// PDU is one NVMe/TCP PDU cut out of a reassembled connection by its PLEN.
type PDU struct {
	Conn   int // Conn.Index
	Dir    int // 0 client (host) → server, 1 server (controller) → client
	Frame  int // frame in which its last byte arrived
	Offset int // offset in its direction's stream
	Raw    []byte
}

// NVMeTCPPDUs splits every connection of a capture into NVMe/TCP PDUs and
// returns them ordered by the frame their last byte arrived in.
func NVMeTCPPDUs(path string) ([]PDU, error) {
	conns, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []PDU
	for _, c := range conns {
		for dir := 0; dir < 2; dir++ {
			s := c.Stream[dir]
			for off := 0; off < len(s); {
				if len(s)-off < 8 {
					return nil, fmt.Errorf("%s stream %d dir %d: %d trailing bytes", path, c.Index, dir, len(s)-off)
				}
				plen := int(binary.LittleEndian.Uint32(s[off+4:]))
				if plen < 8 || off+plen > len(s) {
					return nil, fmt.Errorf("%s stream %d dir %d: bad plen %d at %d", path, c.Index, dir, plen, off)
				}
				out = append(out, PDU{Conn: c.Index, Dir: dir, Frame: c.FrameAt(dir, off+plen-1), Offset: off, Raw: s[off : off+plen]})
				off += plen
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Frame != out[j].Frame {
			return out[i].Frame < out[j].Frame
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}
