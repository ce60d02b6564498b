#include "textflag.h"

// Fold constants for the Castagnoli polynomial in the bit-reflected form
// PCLMULQDQ folding uses: for a distance of T bits, the low quadword of
// each 128-bit lane multiplies x^(T+31) mod P and the high one x^(T-33)
// mod P, both bit-reversed (see fold_test.go, which derives them).
DATA k2048<>+0(SB)/8, $0x00000000dcb17aa4
DATA k2048<>+8(SB)/8, $0x00000000b9e02b86
GLOBL k2048<>(SB), RODATA, $16
DATA k512<>+0(SB)/8, $0x00000000740eef02
DATA k512<>+8(SB)/8, $0x000000009e4addf8
GLOBL k512<>(SB), RODATA, $16

// FOLD_STEP moves each accumulator Z0-Z3 2048 bits ahead (constants in Z8)
// and xors in the next 256 bytes, loaded into Z12-Z15.
#define FOLD_STEP \
	VPCLMULQDQ $0x00, Z8, Z0, Z4 \
	VPCLMULQDQ $0x11, Z8, Z0, Z0 \
	VPCLMULQDQ $0x00, Z8, Z1, Z5 \
	VPCLMULQDQ $0x11, Z8, Z1, Z1 \
	VPCLMULQDQ $0x00, Z8, Z2, Z6 \
	VPCLMULQDQ $0x11, Z8, Z2, Z2 \
	VPCLMULQDQ $0x00, Z8, Z3, Z7 \
	VPCLMULQDQ $0x11, Z8, Z3, Z3 \
	VPTERNLOGD $0x96, Z12, Z4, Z0 \
	VPTERNLOGD $0x96, Z13, Z5, Z1 \
	VPTERNLOGD $0x96, Z14, Z6, Z2 \
	VPTERNLOGD $0x96, Z15, Z7, Z3

// REDUCE_STORE moves Z0 512 bits ahead into Z1, Z1 into Z2, Z2 into Z3,
// stores Z3 (the 64-byte state) at 0(DI) and returns.
#define REDUCE_STORE \
	VBROADCASTI32X4 k512<>(SB), Z8 \
	VPCLMULQDQ      $0x00, Z8, Z0, Z4 \
	VPCLMULQDQ      $0x11, Z8, Z0, Z0 \
	VPTERNLOGD      $0x96, Z4, Z0, Z1 \
	VPCLMULQDQ      $0x00, Z8, Z1, Z4 \
	VPCLMULQDQ      $0x11, Z8, Z1, Z1 \
	VPTERNLOGD      $0x96, Z4, Z1, Z2 \
	VPCLMULQDQ      $0x00, Z8, Z2, Z4 \
	VPCLMULQDQ      $0x11, Z8, Z2, Z2 \
	VPTERNLOGD      $0x96, Z4, Z2, Z3 \
	VMOVDQU64       Z3, 0(DI) \
	VZEROUPPER \
	RET

// func foldAVX512(init uint32, p []byte, state *[64]byte)
TEXT ·foldAVX512(SB), NOSPLIT, $0-40
	MOVL init+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ state+32(FP), DI

	// Four 64-byte accumulators hold the first 256 bytes; init goes into
	// the first four (VMOVD zeroes the rest of Z4).
	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVD     AX, X4
	VPXORQ    Z4, Z0, Z0
	ADDQ      $256, SI
	SUBQ      $256, CX

	// Each accumulator lane moves 2048 bits ahead and takes the next block.
	VBROADCASTI32X4 k2048<>(SB), Z8

loop:
	CMPQ CX, $256
	JB   reduce
	VMOVDQU64  0(SI), Z12
	VMOVDQU64  64(SI), Z13
	VMOVDQU64  128(SI), Z14
	VMOVDQU64  192(SI), Z15
	FOLD_STEP
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop

reduce:
	REDUCE_STORE

// func foldCopyAVX512(init uint32, dst, src []byte, state *[64]byte)
// is foldAVX512 over src that also stores every block it loads into dst
// (len(dst) >= len(src)): one pass over the bytes instead of a copy and
// then a checksum.
TEXT ·foldCopyAVX512(SB), NOSPLIT, $0-64
	MOVL init+0(FP), AX
	MOVQ dst_base+8(FP), DX
	MOVQ src_base+32(FP), SI
	MOVQ src_len+40(FP), CX
	MOVQ state+56(FP), DI

	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVDQU64 Z0, 0(DX)
	VMOVDQU64 Z1, 64(DX)
	VMOVDQU64 Z2, 128(DX)
	VMOVDQU64 Z3, 192(DX)
	VMOVD     AX, X4
	VPXORQ    Z4, Z0, Z0
	ADDQ      $256, SI
	ADDQ      $256, DX
	SUBQ      $256, CX

	VBROADCASTI32X4 k2048<>(SB), Z8

copyloop:
	CMPQ CX, $256
	JB   copyreduce
	VMOVDQU64  0(SI), Z12
	VMOVDQU64  64(SI), Z13
	VMOVDQU64  128(SI), Z14
	VMOVDQU64  192(SI), Z15
	VMOVDQU64  Z12, 0(DX)
	VMOVDQU64  Z13, 64(DX)
	VMOVDQU64  Z14, 128(DX)
	VMOVDQU64  Z15, 192(DX)
	FOLD_STEP
	ADDQ       $256, SI
	ADDQ       $256, DX
	SUBQ       $256, CX
	JMP        copyloop

copyreduce:
	REDUCE_STORE
