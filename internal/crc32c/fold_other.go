//go:build !amd64

package crc32c

const haveFold = false

func foldAVX512(uint32, []byte, *[64]byte) { panic("crc32c: no vector path on this architecture") }

func foldCopyAVX512(uint32, []byte, []byte, *[64]byte) {
	panic("crc32c: no vector path on this architecture")
}
