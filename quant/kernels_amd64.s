//go:build amd64 && !purego

#include "textflag.h"

// 1.5·2^23 in every lane: adding and subtracting it rounds to an integer,
// ties to even, for magnitudes below 2^22.
DATA roundMagic8<>+0(SB)/4, $0x4b400000
DATA roundMagic8<>+4(SB)/4, $0x4b400000
DATA roundMagic8<>+8(SB)/4, $0x4b400000
DATA roundMagic8<>+12(SB)/4, $0x4b400000
DATA roundMagic8<>+16(SB)/4, $0x4b400000
DATA roundMagic8<>+20(SB)/4, $0x4b400000
DATA roundMagic8<>+24(SB)/4, $0x4b400000
DATA roundMagic8<>+28(SB)/4, $0x4b400000
GLOBL roundMagic8<>(SB), RODATA|NOPTR, $32

// 0, 1, ..., 7: the lane offsets of the candidate index.
DATA laneIndex8<>+0(SB)/4, $0x00000000
DATA laneIndex8<>+4(SB)/4, $0x3f800000
DATA laneIndex8<>+8(SB)/4, $0x40000000
DATA laneIndex8<>+12(SB)/4, $0x40400000
DATA laneIndex8<>+16(SB)/4, $0x40800000
DATA laneIndex8<>+20(SB)/4, $0x40a00000
DATA laneIndex8<>+24(SB)/4, $0x40c00000
DATA laneIndex8<>+28(SB)/4, $0x40e00000
GLOBL laneIndex8<>(SB), RODATA|NOPTR, $32

// Quiet NaN in every lane: the error of a candidate that cannot win.
DATA nan8<>+0(SB)/4, $0x7fc00000
DATA nan8<>+4(SB)/4, $0x7fc00000
DATA nan8<>+8(SB)/4, $0x7fc00000
DATA nan8<>+12(SB)/4, $0x7fc00000
DATA nan8<>+16(SB)/4, $0x7fc00000
DATA nan8<>+20(SB)/4, $0x7fc00000
DATA nan8<>+24(SB)/4, $0x7fc00000
DATA nan8<>+28(SB)/4, $0x7fc00000
GLOBL nan8<>(SB), RODATA|NOPTR, $32

// Everything but the sign bit, in every lane.
DATA absMask8<>+0(SB)/4, $0x7fffffff
DATA absMask8<>+4(SB)/4, $0x7fffffff
DATA absMask8<>+8(SB)/4, $0x7fffffff
DATA absMask8<>+12(SB)/4, $0x7fffffff
DATA absMask8<>+16(SB)/4, $0x7fffffff
DATA absMask8<>+20(SB)/4, $0x7fffffff
DATA absMask8<>+24(SB)/4, $0x7fffffff
DATA absMask8<>+28(SB)/4, $0x7fffffff
GLOBL absMask8<>(SB), RODATA|NOPTR, $32

// One lane group of qxLaneSums: l = clamp(round(is·x)), sumlx += (w·x)·l,
// suml2 += (w·l)·l. IS, SLX, SL2 are the group's registers; Y9, Y10, Y11
// hold x[i], w[i]·x[i], w[i] broadcast; Y14, Y15 the clamp bounds.
#define QX_GROUP(IS, SLX, SL2) \
	VMULPS Y9, IS, Y12 \
	VADDPS roundMagic8<>(SB), Y12, Y12 \
	VSUBPS roundMagic8<>(SB), Y12, Y12 \
	VMAXPS Y14, Y12, Y12 \
	VMINPS Y15, Y12, Y12 \
	VMULPS Y12, Y10, Y13 \
	VADDPS Y13, SLX, SLX \
	VMULPS Y12, Y11, Y13 \
	VMULPS Y12, Y13, Y13 \
	VADDPS Y13, SL2, SL2

// func qxLaneSumsAVX2(x, w *float32, n int, num *[24]float32, vmax, lo, hi float32, sumlx, suml2 *[24]float32)
TEXT ·qxLaneSumsAVX2(SB), NOSPLIT, $0-64
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ num+24(FP), AX
	VBROADCASTSS vmax+32(FP), Y9
	VBROADCASTSS lo+36(FP), Y14
	VBROADCASTSS hi+40(FP), Y15
	MOVQ sumlx+48(FP), R9
	MOVQ suml2+56(FP), R10
	VMOVUPS (AX), Y0
	VMOVUPS 32(AX), Y1
	VMOVUPS 64(AX), Y2
	VDIVPS Y9, Y0, Y0
	VDIVPS Y9, Y1, Y1
	VDIVPS Y9, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8

qxloop:
	VBROADCASTSS (SI), Y9
	VBROADCASTSS (DI), Y11
	VMULPS Y9, Y11, Y10
	QX_GROUP(Y0, Y3, Y6)
	QX_GROUP(Y1, Y4, Y7)
	QX_GROUP(Y2, Y5, Y8)
	ADDQ $4, SI
	ADDQ $4, DI
	DECQ CX
	JNZ  qxloop

	VMOVUPS Y3, (R9)
	VMOVUPS Y4, 32(R9)
	VMOVUPS Y5, 64(R9)
	VMOVUPS Y6, (R10)
	VMOVUPS Y7, 32(R10)
	VMOVUPS Y8, 64(R10)
	VZEROUPPER
	RET

// func qkxLaneEvalAVX2(x, w, xm *float32, n int, p *qkxParams, o *qkxLaneOut)
//
// Y0: the lanes' inverse scales; Y1, Y2, Y3: Σ w·l, Σ (w·l)·l, Σ (w·l)·x,
// then Y1 the error; Y4: nmax; Y5: zero; Y6: 1.5·2^23; Y10, Y11: the
// refined scale and offset; Y15: lanes whose normal equations are regular.
TEXT ·qkxLaneEvalAVX2(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ xm+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ p+32(FP), AX
	MOVQ o+40(FP), DX
	MOVQ SI, R11
	MOVQ DI, R12
	MOVQ CX, R10

	// iscale = ((rmin + rdelta·(is0+k)) + nmax) / span
	VBROADCASTSS 0(AX), Y0
	VADDPS       laneIndex8<>(SB), Y0, Y0
	VBROADCASTSS 8(AX), Y1
	VMULPS       Y1, Y0, Y0
	VBROADCASTSS 4(AX), Y1
	VADDPS       Y0, Y1, Y0
	VBROADCASTSS 12(AX), Y4
	VADDPS       Y4, Y0, Y0
	VBROADCASTSS 16(AX), Y1
	VDIVPS       Y1, Y0, Y0
	CMPL         32(AX), $0
	JE           qkxnoinit
	VBROADCASTSS 36(AX), Y1
	VBLENDPS     $1, Y1, Y0, Y0

qkxnoinit:
	VXORPS       Y5, Y5, Y5
	VMOVUPS      roundMagic8<>(SB), Y6
	VXORPS       Y1, Y1, Y1
	VXORPS       Y2, Y2, Y2
	VXORPS       Y3, Y3, Y3
	LEAQ         96(DX), R9

qkxsums:
	VBROADCASTSS (R8), Y8
	VBROADCASTSS (DI), Y9
	VBROADCASTSS (SI), Y13
	VMULPS       Y8, Y0, Y11
	VADDPS       Y6, Y11, Y11
	VSUBPS       Y6, Y11, Y11
	VMAXPS       Y5, Y11, Y11
	VMINPS       Y4, Y11, Y11
	VMOVUPS      Y11, (R9)
	VMULPS       Y11, Y9, Y12
	VADDPS       Y12, Y1, Y1
	VMULPS       Y11, Y12, Y14
	VADDPS       Y14, Y2, Y2
	VMULPS       Y13, Y12, Y14
	VADDPS       Y14, Y3, Y3
	ADDQ         $4, SI
	ADDQ         $4, DI
	ADDQ         $4, R8
	ADDQ         $32, R9
	DECQ         CX
	JNZ          qkxsums

	// D = sumW·sumL2 - sumL·sumL; s = (sumW·sumXL - sumX·sumL)/D;
	// m = (sumL2·sumX - sumL·sumXL)/D; where m > 0: m = 0, s = sumXL/sumL2.
	VBROADCASTSS 20(AX), Y7
	VBROADCASTSS 24(AX), Y8
	VMULPS       Y2, Y7, Y9
	VMULPS       Y1, Y1, Y10
	VSUBPS       Y10, Y9, Y9
	VCMPPS       $0x1e, Y5, Y9, Y15
	VMULPS       Y3, Y7, Y10
	VMULPS       Y1, Y8, Y11
	VSUBPS       Y11, Y10, Y10
	VDIVPS       Y9, Y10, Y10
	VMULPS       Y8, Y2, Y11
	VMULPS       Y3, Y1, Y12
	VSUBPS       Y12, Y11, Y11
	VDIVPS       Y9, Y11, Y11
	VCMPPS       $0x1e, Y5, Y11, Y12
	VDIVPS       Y2, Y3, Y13
	VBLENDVPS    Y12, Y13, Y10, Y10
	VANDNPS      Y11, Y12, Y11
	CMPL         32(AX), $0
	JE           qkxerr
	// The first candidate: its own scale and offset, and always regular.
	VBROADCASTSS 40(AX), Y12
	VBLENDPS     $1, Y12, Y10, Y10
	VBROADCASTSS 44(AX), Y12
	VBLENDPS     $1, Y12, Y11, Y11
	VPCMPEQD     Y12, Y12, Y12
	VBLENDPS     $1, Y12, Y15, Y15

qkxerr:

	// The error: Σ w·(s·l + m - x)² or Σ w·|s·l + m - x|.
	MOVQ   R11, SI
	MOVQ   R12, DI
	MOVQ   R10, CX
	LEAQ   96(DX), R9
	VXORPS Y1, Y1, Y1
	CMPL   28(AX), $0
	JNE    qkxmad

qkxsq:
	VMOVUPS      (R9), Y8
	VBROADCASTSS (SI), Y9
	VBROADCASTSS (DI), Y13
	VMULPS       Y8, Y10, Y12
	VADDPS       Y11, Y12, Y12
	VSUBPS       Y9, Y12, Y12
	VMULPS       Y12, Y12, Y12
	VMULPS       Y12, Y13, Y12
	VADDPS       Y12, Y1, Y1
	ADDQ         $4, SI
	ADDQ         $4, DI
	ADDQ         $32, R9
	DECQ         CX
	JNZ          qkxsq
	JMP          qkxdone

qkxmad:
	VMOVUPS      absMask8<>(SB), Y7
qkxmadloop:
	VMOVUPS      (R9), Y8
	VBROADCASTSS (SI), Y9
	VBROADCASTSS (DI), Y13
	VMULPS       Y8, Y10, Y12
	VADDPS       Y11, Y12, Y12
	VSUBPS       Y9, Y12, Y12
	VANDPS       Y7, Y12, Y12
	VMULPS       Y12, Y13, Y12
	VADDPS       Y12, Y1, Y1
	ADDQ         $4, SI
	ADDQ         $4, DI
	ADDQ         $32, R9
	DECQ         CX
	JNZ          qkxmadloop

qkxdone:
	VMOVUPS   nan8<>(SB), Y2
	VBLENDVPS Y15, Y1, Y2, Y1
	VMOVUPS   Y1, (DX)
	VMOVUPS   Y10, 32(DX)
	VMOVUPS   Y11, 64(DX)
	VZEROUPPER
	RET

// func qxLaneSumsAVX512(x, w *float32, n int, num *[24]float32, vmax, lo, hi float32, sumlx, suml2 *[24]float32)
//
// Lanes 0-15 in Z registers, 16-23 in Y registers: Z0/Y1 the inverse
// scales, Z2/Y3 Σ (w·x)·l, Z4/Y5 Σ (w·l)·l; Z6, Z7, Z8: x[i], w[i],
// w[i]·x[i] in every lane; Z9: 1.5·2^23; Z10, Z11: the clamp bounds.
TEXT ·qxLaneSumsAVX512(SB), NOSPLIT, $0-64
	MOVQ         x+0(FP), SI
	MOVQ         w+8(FP), DI
	MOVQ         n+16(FP), CX
	MOVQ         num+24(FP), AX
	VBROADCASTSS vmax+32(FP), Z12
	VBROADCASTSS lo+36(FP), Z10
	VBROADCASTSS hi+40(FP), Z11
	MOVQ         sumlx+48(FP), R9
	MOVQ         suml2+56(FP), R10
	VBROADCASTSS roundMagic8<>(SB), Z9
	VMOVUPS      (AX), Z0
	VMOVUPS      64(AX), Y1
	VDIVPS       Z12, Z0, Z0
	VDIVPS       Y12, Y1, Y1
	VXORPS       Z2, Z2, Z2
	VXORPS       Y3, Y3, Y3
	VXORPS       Z4, Z4, Z4
	VXORPS       Y5, Y5, Y5

qx512loop:
	VBROADCASTSS (SI), Z6
	VBROADCASTSS (DI), Z7
	VMULPS       Z6, Z7, Z8
	VMULPS       Z6, Z0, Z12
	VMULPS       Y6, Y1, Y13
	VADDPS       Z9, Z12, Z12
	VADDPS       Y9, Y13, Y13
	VSUBPS       Z9, Z12, Z12
	VSUBPS       Y9, Y13, Y13
	VMAXPS       Z10, Z12, Z12
	VMAXPS       Y10, Y13, Y13
	VMINPS       Z11, Z12, Z12
	VMINPS       Y11, Y13, Y13
	VMULPS       Z12, Z8, Z14
	VMULPS       Y13, Y8, Y15
	VADDPS       Z14, Z2, Z2
	VADDPS       Y15, Y3, Y3
	VMULPS       Z12, Z7, Z14
	VMULPS       Y13, Y7, Y15
	VMULPS       Z12, Z14, Z14
	VMULPS       Y13, Y15, Y15
	VADDPS       Z14, Z4, Z4
	VADDPS       Y15, Y5, Y5
	ADDQ         $4, SI
	ADDQ         $4, DI
	DECQ         CX
	JNZ          qx512loop

	VMOVUPS Z2, (R9)
	VMOVUPS Y3, 64(R9)
	VMOVUPS Z4, (R10)
	VMOVUPS Y5, 64(R10)
	VZEROUPPER
	RET
