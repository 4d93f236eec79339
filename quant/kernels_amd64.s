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
