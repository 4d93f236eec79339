//go:build amd64 && !purego

#include "textflag.h"

// f32 to f16 and bf16 rows, 16 elements per iteration.

DATA fAbs<>+0(SB)/4, $0x7fffffff
DATA fAbs<>+4(SB)/4, $0x7fffffff
DATA fAbs<>+8(SB)/4, $0x7fffffff
DATA fAbs<>+12(SB)/4, $0x7fffffff
DATA fAbs<>+16(SB)/4, $0x7fffffff
DATA fAbs<>+20(SB)/4, $0x7fffffff
DATA fAbs<>+24(SB)/4, $0x7fffffff
DATA fAbs<>+28(SB)/4, $0x7fffffff
GLOBL fAbs<>(SB), RODATA|NOPTR, $32
DATA fSign<>+0(SB)/4, $0x80000000
DATA fSign<>+4(SB)/4, $0x80000000
DATA fSign<>+8(SB)/4, $0x80000000
DATA fSign<>+12(SB)/4, $0x80000000
DATA fSign<>+16(SB)/4, $0x80000000
DATA fSign<>+20(SB)/4, $0x80000000
DATA fSign<>+24(SB)/4, $0x80000000
DATA fSign<>+28(SB)/4, $0x80000000
GLOBL fSign<>(SB), RODATA|NOPTR, $32
DATA fQNaN<>+0(SB)/4, $0x7fc00000
DATA fQNaN<>+4(SB)/4, $0x7fc00000
DATA fQNaN<>+8(SB)/4, $0x7fc00000
DATA fQNaN<>+12(SB)/4, $0x7fc00000
DATA fQNaN<>+16(SB)/4, $0x7fc00000
DATA fQNaN<>+20(SB)/4, $0x7fc00000
DATA fQNaN<>+24(SB)/4, $0x7fc00000
DATA fQNaN<>+28(SB)/4, $0x7fc00000
GLOBL fQNaN<>(SB), RODATA|NOPTR, $32
DATA fInf<>+0(SB)/4, $0x7f800000
DATA fInf<>+4(SB)/4, $0x7f800000
DATA fInf<>+8(SB)/4, $0x7f800000
DATA fInf<>+12(SB)/4, $0x7f800000
DATA fInf<>+16(SB)/4, $0x7f800000
DATA fInf<>+20(SB)/4, $0x7f800000
DATA fInf<>+24(SB)/4, $0x7f800000
DATA fInf<>+28(SB)/4, $0x7f800000
GLOBL fInf<>(SB), RODATA|NOPTR, $32
DATA f7fff<>+0(SB)/4, $0x00007fff
DATA f7fff<>+4(SB)/4, $0x00007fff
DATA f7fff<>+8(SB)/4, $0x00007fff
DATA f7fff<>+12(SB)/4, $0x00007fff
DATA f7fff<>+16(SB)/4, $0x00007fff
DATA f7fff<>+20(SB)/4, $0x00007fff
DATA f7fff<>+24(SB)/4, $0x00007fff
DATA f7fff<>+28(SB)/4, $0x00007fff
GLOBL f7fff<>(SB), RODATA|NOPTR, $32
DATA fOne<>+0(SB)/4, $0x00000001
DATA fOne<>+4(SB)/4, $0x00000001
DATA fOne<>+8(SB)/4, $0x00000001
DATA fOne<>+12(SB)/4, $0x00000001
DATA fOne<>+16(SB)/4, $0x00000001
DATA fOne<>+20(SB)/4, $0x00000001
DATA fOne<>+24(SB)/4, $0x00000001
DATA fOne<>+28(SB)/4, $0x00000001
GLOBL fOne<>(SB), RODATA|NOPTR, $32
DATA fBF16Quiet<>+0(SB)/4, $0x00000040
DATA fBF16Quiet<>+4(SB)/4, $0x00000040
DATA fBF16Quiet<>+8(SB)/4, $0x00000040
DATA fBF16Quiet<>+12(SB)/4, $0x00000040
DATA fBF16Quiet<>+16(SB)/4, $0x00000040
DATA fBF16Quiet<>+20(SB)/4, $0x00000040
DATA fBF16Quiet<>+24(SB)/4, $0x00000040
DATA fBF16Quiet<>+28(SB)/4, $0x00000040
GLOBL fBF16Quiet<>(SB), RODATA|NOPTR, $32

// X = x with every NaN replaced by the quiet NaN of its sign and no
// payload, which F16C converts to ggml's sign|0x7e00. T is a temporary.
#define F16_NAN_FIX(X, T) \
	VCMPPS    $3, X, X, T \
	VANDPS    Y13, X, Y12 \
	VORPS     Y14, Y12, Y12 \
	VBLENDVPS T, Y12, X, X

// func f16RowVec(dst *byte, src *float32, n int)
// n is a multiple of 16.
TEXT ·f16RowVec(SB), NOSPLIT, $0-24
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    n+16(FP), CX
	VMOVUPS fSign<>(SB), Y13
	VMOVUPS fQNaN<>(SB), Y14
	SHRQ    $4, CX
	JZ      f16done

f16loop:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	F16_NAN_FIX(Y0, Y2)
	F16_NAN_FIX(Y1, Y3)
	VCVTPS2PH $0, Y0, X0
	VCVTPS2PH $0, Y1, X1
	VMOVDQU   X0, (DI)
	VMOVDQU   X1, 16(DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       f16loop

f16done:
	VZEROUPPER
	RET

// Y = bfloat16 of the bits in X (32-bit lanes): rounded to nearest even,
// or the top half with the quiet bit for a NaN.
#define BF16(X, Y) \
	VPSRLD    $16, X, Y8 \
	VPAND     Y11, Y8, Y9 \
	VPADDD    Y10, X, Y \
	VPADDD    Y9, Y, Y \
	VPSRLD    $16, Y, Y \
	VPOR      Y12, Y8, Y8 \
	VPAND     Y14, X, Y9 \
	VPCMPGTD  Y13, Y9, Y9 \
	VPBLENDVB Y9, Y8, Y, Y

// func bf16RowVec(dst *byte, src *float32, n int)
// n is a multiple of 16.
TEXT ·bf16RowVec(SB), NOSPLIT, $0-24
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    n+16(FP), CX
	VMOVDQU f7fff<>(SB), Y10
	VMOVDQU fOne<>(SB), Y11
	VMOVDQU fBF16Quiet<>(SB), Y12
	VMOVDQU fInf<>(SB), Y13
	VMOVDQU fAbs<>(SB), Y14
	SHRQ    $4, CX
	JZ      bf16done

bf16loop:
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	BF16(Y0, Y2)
	BF16(Y1, Y3)
	VPACKUSDW Y3, Y2, Y2
	VPERMQ    $0xd8, Y2, Y2
	VMOVDQU   Y2, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       bf16loop

bf16done:
	VZEROUPPER
	RET

// func f16DecodeRowVec(dst *float32, src *byte, n int)
// n is a multiple of 16. F16C widens exactly, and keeps a NaN's sign and
// payload with the quiet bit set, as F16ToF32 does.
TEXT ·f16DecodeRowVec(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   f16ddone

f16dloop:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       f16dloop

f16ddone:
	VZEROUPPER
	RET
