package crc32c

// poly is the reflected Castagnoli polynomial.
const poly = 0x82F63B78

// mulMod returns a(x)·b(x) modulo the Castagnoli polynomial (reflected bit
// order: bit 31 is x^0).
func mulMod(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ poly
		} else {
			b >>= 1
		}
	}
}

// Combine returns the CRC32C of A‖B given crc1 = CRC32C(A), crc2 =
// CRC32C(B) and len2 = len(B) (zlib's crc32_combine, by repeated
// squaring), so parts of a buffer checksummed separately (in parallel, or
// as they arrive) give the whole buffer's checksum.
func Combine(crc1, crc2 uint32, len2 uint64) uint32 {
	if len2 == 0 {
		return crc1
	}
	p := uint32(1) << 31  // x^0
	sq := uint32(1) << 23 // x^8: one byte
	for n := len2; n > 0; n >>= 1 {
		if n&1 != 0 {
			p = mulMod(sq, p)
		}
		sq = mulMod(sq, sq)
	}
	return mulMod(p, crc1) ^ crc2
}
