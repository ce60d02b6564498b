package crc32c

import "golang.org/x/sys/cpu"

// haveFold: the vector path needs AVX-512 (foundation) and VPCLMULQDQ, with
// the OS saving the 512-bit registers (x/sys/cpu checks that).
var haveFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ

// foldAVX512 folds p (len a positive multiple of 256) into state, with
// init xored into p's first four bytes. Implemented in fold_amd64.s.
//
//go:noescape
func foldAVX512(init uint32, p []byte, state *[64]byte)

// foldCopyAVX512 is foldAVX512 over src that also copies each block it
// reads into dst (len(dst) >= len(src)). Implemented in fold_amd64.s.
//
//go:noescape
func foldCopyAVX512(init uint32, dst, src []byte, state *[64]byte)
