// Package pdu owns the NVMe/TCP wire format (NVM Express TCP Transport
// Specification 1.0): encoding, decoding and validation of every PDU, the
// CRC32C header and data digests, PDU data alignment (HPDA/CPDA) and a
// streaming Reader and coalescing Writer used by nof/target and nof/initiator.
// It imports nothing from kvtier; anything may import it.
//
// # Byte format (all integers little-endian, all structures packed)
//
// Every PDU starts with an 8-byte common header:
//
//	+0 type u8   0 ICReq, 1 ICResp, 2 H2CTermReq, 3 C2HTermReq, 4 CapsuleCmd,
//	             5 CapsuleResp, 6 H2CData, 7 C2HData, 9 R2T
//	+1 flags u8  bit0 HDGSTF, bit1 DDGSTF, bit2 LAST_PDU, bit3 SUCCESS
//	+2 hlen u8   header length without digest (fixed per type, see below)
//	+3 pdo u8    offset of the data from the PDU start, 0 when there is no data
//	+4 plen u32  total length: hlen + [hdgst 4] + pad + data + [ddgst 4]
//
// Layout: CH+PSH (hlen bytes) | HDGST? | zero padding up to PDO | DATA | DDGST?
//
// Fixed hlen and type-specific header fields (offsets from the PDU start):
//
//	ICReq  (128) +8 PFV u16, +10 HPDA u8, +11 DGST u8 (bit0 hdgst, bit1 ddgst), +12 MAXR2T u32
//	ICResp (128) +8 PFV u16, +10 CPDA u8, +11 DGST u8, +12 MAXH2CDATA u32
//	TermReq (24) +8 FES u16, +10 FEI u32; followed (at offset 24, PDO 0) by up
//	             to 128 bytes of the offending PDU header; PLEN <= 152
//	CapsuleCmd (72) +8 the 64-byte SQE (see Command); in-capsule data at PDO
//	CapsuleResp(24) +8 the 16-byte CQE (see Completion)
//	H2CData (24) +8 CCCID u16, +10 TTAG u16, +12 DATAO u32, +16 DATAL u32
//	C2HData (24) +8 CCCID u16, +12 DATAO u32, +16 DATAL u32
//	R2T     (24) +8 CCCID u16, +10 TTAG u16, +12 R2TO u32, +16 R2TL u32
//
// Digests are CRC32C (Castagnoli, init and final xor 0xFFFFFFFF), stored
// little-endian. HDGST covers the hlen header bytes of CapsuleCmd,
// CapsuleResp, H2CData, C2HData and R2T (never IC or TermReq PDUs); DDGST
// covers the data bytes only (not the padding) of CapsuleCmd with in-capsule
// data, H2CData and C2HData. Which digests are used is fixed per connection by
// ICReq/ICResp; the per-PDU flag bits must agree with that negotiation.
//
// When a PDU carries data its PDO is hlen (+4 with HDGST) rounded up to a
// multiple of (PDA+1)*4, where PDA is the receiver's requested alignment
// (CPDA for PDUs the host sends, HPDA for PDUs the controller sends).
//
// # Validation
//
// Reader validates each PDU before it hands it out and returns an *Error that
// names the field and carries the Fatal Error Status (FES) and Fatal Error
// Information (FEI, the byte offset of the bad field) that the receiver must
// put into a TermReq (see TermReqFor):
//
//	PDU type not legal for this side or connection state  FES 1, FEI 0
//	flags digest bits disagree with the negotiation        FES 1, FEI 1
//	hlen not the fixed value of the type                   FES 1, FEI 2
//	pdo not aligned, inside the header or past the data    FES 1, FEI 3
//	plen wrong for the type or larger than the limits      FES 1, FEI 4
//	ICReq/ICResp PFV != 0                                  FES 1, FEI 8
//	ICReq HPDA > 31 / ICResp CPDA > 31                     FES 1, FEI 10
//	data PDU DATAL != data carried                         FES 1, FEI 16
//	H2CData DATAL > MAXH2CDATA                             FES 5, FEI 16
//	header digest mismatch                                 FES 3, FEI 0
//	data digest mismatch                                   FES 3, FEI 0 if the receiver terminates;
//	                                                       nof/target and nof/initiator instead fail
//	                                                       only that command (Transient Transport Error,
//	                                                       as NVMe/TCP 1.0 and SPDK v26 do)
//
// Checks that need command state (unknown CCCID/TTAG, data outside the R2T
// window) are made by the target with the same Error type (FES 1 with the
// CCCID/TTAG offset, FES 4 for out-of-range data).
//
// When CH and PLEN say the whole header is present it is read (and its
// digest verified) before the PLEN/PDO checks, so an *Error carries the full
// offending header for the TermReq; otherwise only the 8-byte CH. A TermReq
// carries its data right after its 24-byte header with PDO 0 (as SPDK and
// Linux send it).
//
// # Reader and Writer
//
// Reader (one goroutine) returns a *Frame per PDU; its data is then read with
// ReadData straight into a caller buffer of exactly DataLen bytes (data
// digest verified there) or with Data into a reusable internal buffer, or
// skipped by the next Next. Writer (any number of goroutines) encodes each
// PDU into a pending buffer; the first sender that finds no write in flight
// writes everything pending in one syscall outside the lock, so concurrent
// completions coalesce. Pending bytes are bounded (8 MiB); a failed write is
// sticky.
//
// Decode decodes one complete PDU (for tests and tools); OptionsOf recovers
// the options it was encoded with, so Decode→AppendPDU reproduces every PDU
// of the SPDK captures byte for byte.
package pdu
