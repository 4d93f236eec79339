//go:build amd64 && !purego

#include "textflag.h"

// Row kernels for the unweighted legacy quantizers (quantize_row_*_ref),
// one block of 32 per iteration, 8 elements per vector. Each returns the
// number of blocks it encoded: it stops before the first block whose
// special values (NaN, Inf, an extreme of ±0, a scale whose inverse
// overflows) the scalar code must handle, which then goes on after it.

// |x| mask, sign mask, the largest float below 0.5, and small constants.
DATA lAbs<>+0(SB)/4, $0x7fffffff
DATA lAbs<>+4(SB)/4, $0x7fffffff
DATA lAbs<>+8(SB)/4, $0x7fffffff
DATA lAbs<>+12(SB)/4, $0x7fffffff
DATA lAbs<>+16(SB)/4, $0x7fffffff
DATA lAbs<>+20(SB)/4, $0x7fffffff
DATA lAbs<>+24(SB)/4, $0x7fffffff
DATA lAbs<>+28(SB)/4, $0x7fffffff
GLOBL lAbs<>(SB), RODATA|NOPTR, $32

DATA lSign<>+0(SB)/4, $0x80000000
DATA lSign<>+4(SB)/4, $0x80000000
DATA lSign<>+8(SB)/4, $0x80000000
DATA lSign<>+12(SB)/4, $0x80000000
DATA lSign<>+16(SB)/4, $0x80000000
DATA lSign<>+20(SB)/4, $0x80000000
DATA lSign<>+24(SB)/4, $0x80000000
DATA lSign<>+28(SB)/4, $0x80000000
GLOBL lSign<>(SB), RODATA|NOPTR, $32

DATA lHalfDown<>+0(SB)/4, $0x3effffff
DATA lHalfDown<>+4(SB)/4, $0x3effffff
DATA lHalfDown<>+8(SB)/4, $0x3effffff
DATA lHalfDown<>+12(SB)/4, $0x3effffff
DATA lHalfDown<>+16(SB)/4, $0x3effffff
DATA lHalfDown<>+20(SB)/4, $0x3effffff
DATA lHalfDown<>+24(SB)/4, $0x3effffff
DATA lHalfDown<>+28(SB)/4, $0x3effffff
GLOBL lHalfDown<>(SB), RODATA|NOPTR, $32

DATA lHalf<>+0(SB)/4, $0x3f000000
DATA lHalf<>+4(SB)/4, $0x3f000000
DATA lHalf<>+8(SB)/4, $0x3f000000
DATA lHalf<>+12(SB)/4, $0x3f000000
DATA lHalf<>+16(SB)/4, $0x3f000000
DATA lHalf<>+20(SB)/4, $0x3f000000
DATA lHalf<>+24(SB)/4, $0x3f000000
DATA lHalf<>+28(SB)/4, $0x3f000000
GLOBL lHalf<>(SB), RODATA|NOPTR, $32

DATA l8p5<>+0(SB)/4, $0x41080000
DATA l8p5<>+4(SB)/4, $0x41080000
DATA l8p5<>+8(SB)/4, $0x41080000
DATA l8p5<>+12(SB)/4, $0x41080000
DATA l8p5<>+16(SB)/4, $0x41080000
DATA l8p5<>+20(SB)/4, $0x41080000
DATA l8p5<>+24(SB)/4, $0x41080000
DATA l8p5<>+28(SB)/4, $0x41080000
GLOBL l8p5<>(SB), RODATA|NOPTR, $32

DATA l16p5<>+0(SB)/4, $0x41840000
DATA l16p5<>+4(SB)/4, $0x41840000
DATA l16p5<>+8(SB)/4, $0x41840000
DATA l16p5<>+12(SB)/4, $0x41840000
DATA l16p5<>+16(SB)/4, $0x41840000
DATA l16p5<>+20(SB)/4, $0x41840000
DATA l16p5<>+24(SB)/4, $0x41840000
DATA l16p5<>+28(SB)/4, $0x41840000
GLOBL l16p5<>(SB), RODATA|NOPTR, $32

DATA l15i<>+0(SB)/4, $15
DATA l15i<>+4(SB)/4, $15
DATA l15i<>+8(SB)/4, $15
DATA l15i<>+12(SB)/4, $15
DATA l15i<>+16(SB)/4, $15
DATA l15i<>+20(SB)/4, $15
DATA l15i<>+24(SB)/4, $15
DATA l15i<>+28(SB)/4, $15
GLOBL l15i<>(SB), RODATA|NOPTR, $32

DATA l31i<>+0(SB)/4, $31
DATA l31i<>+4(SB)/4, $31
DATA l31i<>+8(SB)/4, $31
DATA l31i<>+12(SB)/4, $31
DATA l31i<>+16(SB)/4, $31
DATA l31i<>+20(SB)/4, $31
DATA l31i<>+24(SB)/4, $31
DATA l31i<>+28(SB)/4, $31
GLOBL l31i<>(SB), RODATA|NOPTR, $32

// The dword order that undoes the in-lane interleave of the pack instructions.
DATA packPerm<>+0(SB)/4, $0
DATA packPerm<>+4(SB)/4, $4
DATA packPerm<>+8(SB)/4, $1
DATA packPerm<>+12(SB)/4, $5
DATA packPerm<>+16(SB)/4, $2
DATA packPerm<>+20(SB)/4, $6
DATA packPerm<>+24(SB)/4, $3
DATA packPerm<>+28(SB)/4, $7
GLOBL packPerm<>(SB), RODATA|NOPTR, $32

DATA lOne<>+0(SB)/4, $0x3f800000
GLOBL lOne<>(SB), RODATA|NOPTR, $4
DATA l127<>+0(SB)/4, $0x42fe0000
GLOBL l127<>(SB), RODATA|NOPTR, $4
DATA lM8<>+0(SB)/4, $0xc1000000
GLOBL lM8<>(SB), RODATA|NOPTR, $4
DATA lM16<>+0(SB)/4, $0xc1800000
GLOBL lM16<>(SB), RODATA|NOPTR, $4
DATA l15f<>+0(SB)/4, $0x41700000
GLOBL l15f<>(SB), RODATA|NOPTR, $4
DATA l31f<>+0(SB)/4, $0x41f80000
GLOBL l31f<>(SB), RODATA|NOPTR, $4

// Loads block (SI) into Y0..Y3, |x| into Y4..Y7, and the largest |x| bit
// pattern into AX (and every lane of X8's low dword).
#define LOAD_ABSMAX \
	VMOVUPS      0(SI), Y0 \
	VMOVUPS      32(SI), Y1 \
	VMOVUPS      64(SI), Y2 \
	VMOVUPS      96(SI), Y3 \
	VANDPS       Y14, Y0, Y4 \
	VANDPS       Y14, Y1, Y5 \
	VANDPS       Y14, Y2, Y6 \
	VANDPS       Y14, Y3, Y7 \
	VPMAXUD      Y5, Y4, Y8 \
	VPMAXUD      Y7, Y6, Y9 \
	VPMAXUD      Y9, Y8, Y8 \
	VEXTRACTI128 $1, Y8, X9 \
	VPMAXUD      X9, X8, X8 \
	VPSHUFD      $0x4e, X8, X9 \
	VPMAXUD      X9, X8, X8 \
	VPSHUFD      $0xb1, X8, X9 \
	VPMAXUD      X9, X8, X8 \
	VMOVD        X8, AX

// X10 = d != 0 ? 1/d : 0 for the scale d in X9; jumps to BAIL when that
// inverse is not finite (d subnormal).
#define INVERSE(BAIL) \
	VMOVSS   lOne<>(SB), X10 \
	VDIVSS   X9, X10, X10 \
	VXORPS   X11, X11, X11 \
	VCMPSS   $0, X11, X9, X11 \
	VANDNPS  X10, X11, X10 \
	VMOVD    X10, BX \
	ANDL     $0x7fffffff, BX \
	CMPL     BX, $0x7f800000 \
	JAE      BAIL

// Stores the f16 of the float in X to 16-bit memory M (round to nearest
// even, as ggml's conversion of a non-NaN float).
#define STORE_F16(X, M) \
	VCVTPS2PH $0, X, X11 \
	VMOVD     X11, BX \
	MOVW      BX, M

// Q = trunc(X·Y10 + C), lanes of int32.
#define LEVEL(X, C, Q) \
	VMULPS    Y10, X, Q \
	VADDPS    C, Q, Q \
	VCVTTPS2DQ Q, Q

// Y0 = 16 bytes q[j] | q[j+16]<<4 (j = 0..15) from the levels in Y0..Y3,
// each below 16.
#define PACK_NIBBLES \
	VPSLLD    $4, Y2, Y2 \
	VPOR      Y2, Y0, Y0 \
	VPSLLD    $4, Y3, Y3 \
	VPOR      Y3, Y1, Y1 \
	VPACKSSDW Y1, Y0, Y0 \
	VPACKUSWB Y0, Y0, Y0 \
	VPERMD    Y0, Y15, Y0

// BX = the 32 bits 4 of the levels in Y0..Y3 (level k at bit k).
#define HIGH_BITS \
	VPSLLD    $27, Y0, Y8 \
	VMOVMSKPS Y8, BX \
	VPSLLD    $27, Y1, Y8 \
	VMOVMSKPS Y8, DX \
	SHLL      $8, DX \
	ORL       DX, BX \
	VPSLLD    $27, Y2, Y8 \
	VMOVMSKPS Y8, DX \
	SHLL      $16, DX \
	ORL       DX, BX \
	VPSLLD    $27, Y3, Y8 \
	VMOVMSKPS Y8, DX \
	SHLL      $24, DX \
	ORL       DX, BX

// func q8_0RowsVec(dst *byte, src *float32, nb int) int
TEXT ·q8_0RowsVec(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    nb+16(FP), CX
	XORQ    R8, R8
	VMOVUPS lAbs<>(SB), Y14
	VMOVUPS packPerm<>(SB), Y15
	VMOVUPS lSign<>(SB), Y12
	VMOVUPS lHalfDown<>(SB), Y13
	TESTQ   CX, CX
	JZ      q8done

q8loop:
	LOAD_ABSMAX
	CMPL   AX, $0x7f800000
	JAE    q8done
	VDIVSS l127<>(SB), X8, X9
	INVERSE(q8done)
	STORE_F16(X9, 0(DI))
	VBROADCASTSS X10, Y10
	// q = trunc(p + copysign(largest float below 0.5, p)), p = x·id
	VMULPS    Y10, Y0, Y0
	VANDPS    Y12, Y0, Y4
	VORPS     Y13, Y4, Y4
	VADDPS    Y4, Y0, Y0
	VCVTTPS2DQ Y0, Y0
	VMULPS    Y10, Y1, Y1
	VANDPS    Y12, Y1, Y5
	VORPS     Y13, Y5, Y5
	VADDPS    Y5, Y1, Y1
	VCVTTPS2DQ Y1, Y1
	VMULPS    Y10, Y2, Y2
	VANDPS    Y12, Y2, Y6
	VORPS     Y13, Y6, Y6
	VADDPS    Y6, Y2, Y2
	VCVTTPS2DQ Y2, Y2
	VMULPS    Y10, Y3, Y3
	VANDPS    Y12, Y3, Y7
	VORPS     Y13, Y7, Y7
	VADDPS    Y7, Y3, Y3
	VCVTTPS2DQ Y3, Y3
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD    Y0, Y15, Y0
	VMOVDQU   Y0, 2(DI)
	ADDQ      $128, SI
	ADDQ      $34, DI
	INCQ      R8
	CMPQ      R8, CX
	JB        q8loop

q8done:
	MOVQ R8, ret+24(FP)
	VZEROUPPER
	RET

// xmax = the first element of largest magnitude, into X8, from Y4..Y7
// and the largest bit pattern in X8.
#define FIRST_MAX \
	VPBROADCASTD X8, Y8 \
	VPCMPEQD     Y8, Y4, Y9 \
	VMOVMSKPS    Y9, BX \
	VPCMPEQD     Y8, Y5, Y9 \
	VMOVMSKPS    Y9, DX \
	SHLL         $8, DX \
	ORL          DX, BX \
	VPCMPEQD     Y8, Y6, Y9 \
	VMOVMSKPS    Y9, DX \
	SHLL         $16, DX \
	ORL          DX, BX \
	VPCMPEQD     Y8, Y7, Y9 \
	VMOVMSKPS    Y9, DX \
	SHLL         $24, DX \
	ORL          DX, BX \
	TZCNTL       BX, BX \
	VMOVSS       (SI)(BX*4), X8

// func q4_0RowsVec(dst *byte, src *float32, nb int) int
TEXT ·q4_0RowsVec(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    nb+16(FP), CX
	XORQ    R8, R8
	VMOVUPS lAbs<>(SB), Y14
	VMOVUPS packPerm<>(SB), Y15
	VMOVUPS l8p5<>(SB), Y13
	VMOVUPS l15i<>(SB), Y12
	TESTQ   CX, CX
	JZ      q40done

q40loop:
	LOAD_ABSMAX
	CMPL   AX, $0x7f800000
	JAE    q40done
	FIRST_MAX
	VDIVSS lM8<>(SB), X8, X9
	INVERSE(q40done)
	STORE_F16(X9, 0(DI))
	VBROADCASTSS X10, Y10
	LEVEL(Y0, Y13, Y0)
	LEVEL(Y1, Y13, Y1)
	LEVEL(Y2, Y13, Y2)
	LEVEL(Y3, Y13, Y3)
	VPMINSD Y12, Y0, Y0
	VPMINSD Y12, Y1, Y1
	VPMINSD Y12, Y2, Y2
	VPMINSD Y12, Y3, Y3
	PACK_NIBBLES
	VMOVDQU X0, 2(DI)
	ADDQ    $128, SI
	ADDQ    $18, DI
	INCQ    R8
	CMPQ    R8, CX
	JB      q40loop

q40done:
	MOVQ R8, ret+24(FP)
	VZEROUPPER
	RET

// func q5_0RowsVec(dst *byte, src *float32, nb int) int
TEXT ·q5_0RowsVec(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    nb+16(FP), CX
	XORQ    R8, R8
	VMOVUPS lAbs<>(SB), Y14
	VMOVUPS packPerm<>(SB), Y15
	VMOVUPS l16p5<>(SB), Y13
	VMOVUPS l31i<>(SB), Y12
	TESTQ   CX, CX
	JZ      q50done

q50loop:
	LOAD_ABSMAX
	CMPL   AX, $0x7f800000
	JAE    q50done
	FIRST_MAX
	VDIVSS lM16<>(SB), X8, X9
	INVERSE(q50done)
	STORE_F16(X9, 0(DI))
	VBROADCASTSS X10, Y10
	LEVEL(Y0, Y13, Y0)
	LEVEL(Y1, Y13, Y1)
	LEVEL(Y2, Y13, Y2)
	LEVEL(Y3, Y13, Y3)
	VPMINSD Y12, Y0, Y0
	VPMINSD Y12, Y1, Y1
	VPMINSD Y12, Y2, Y2
	VPMINSD Y12, Y3, Y3
	HIGH_BITS
	MOVL    BX, 2(DI)
	VPSRLD  $1, Y12, Y8
	VPAND   Y8, Y0, Y0
	VPAND   Y8, Y1, Y1
	VPAND   Y8, Y2, Y2
	VPAND   Y8, Y3, Y3
	PACK_NIBBLES
	VMOVDQU X0, 6(DI)
	ADDQ    $128, SI
	ADDQ    $22, DI
	INCQ    R8
	CMPQ    R8, CX
	JB      q50loop

q50done:
	MOVQ R8, ret+24(FP)
	VZEROUPPER
	RET

// Loads block (SI) into Y0..Y3 and, when no element is NaN or Inf and
// neither extreme is ±0, the minimum into X12 and max-min into X9;
// otherwise jumps to BAIL.
#define MIN_MAX(BAIL) \
	LOAD_ABSMAX \
	CMPL         AX, $0x7f800000 \
	JAE          BAIL \
	VMINPS       Y1, Y0, Y4 \
	VMINPS       Y3, Y2, Y5 \
	VMINPS       Y5, Y4, Y4 \
	VMAXPS       Y1, Y0, Y6 \
	VMAXPS       Y3, Y2, Y7 \
	VMAXPS       Y7, Y6, Y6 \
	VEXTRACTF128 $1, Y4, X5 \
	VMINPS       X5, X4, X4 \
	VPSHUFD      $0x4e, X4, X5 \
	VMINPS       X5, X4, X4 \
	VPSHUFD      $0xb1, X4, X5 \
	VMINPS       X5, X4, X12 \
	VEXTRACTF128 $1, Y6, X7 \
	VMAXPS       X7, X6, X6 \
	VPSHUFD      $0x4e, X6, X7 \
	VMAXPS       X7, X6, X6 \
	VPSHUFD      $0xb1, X6, X7 \
	VMAXPS       X7, X6, X6 \
	VMOVD        X12, AX \
	ANDL         $0x7fffffff, AX \
	JZ           BAIL \
	VMOVD        X6, AX \
	ANDL         $0x7fffffff, AX \
	JZ           BAIL \
	VSUBSS       X12, X6, X9

// X10 = d != 0 ? 1/d : 0 for the step d in X9 (never negative); jumps to
// BAIL when d is subnormal or infinite.
#define STEP_INVERSE(BAIL) \
	VMOVD    X9, AX \
	LEAL     -1(AX), DX \
	CMPL     DX, $0x007fffff \
	JB       BAIL \
	CMPL     AX, $0x7f800000 \
	JAE      BAIL \
	INVERSE(BAIL)

// Q = trunc((X-min)·Y10 + 0.5), lanes of int32; Y12 holds min.
#define LEVEL1(X, Q) \
	VSUBPS    Y12, X, Q \
	VMULPS    Y10, Q, Q \
	VADDPS    Y13, Q, Q \
	VCVTTPS2DQ Q, Q

// func q4_1RowsVec(dst *byte, src *float32, nb int) int
TEXT ·q4_1RowsVec(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    nb+16(FP), CX
	XORQ    R8, R8
	VMOVUPS lAbs<>(SB), Y14
	VMOVUPS packPerm<>(SB), Y15
	VMOVUPS lHalf<>(SB), Y13
	TESTQ   CX, CX
	JZ      q41done

q41loop:
	MIN_MAX(q41done)
	VDIVSS l15f<>(SB), X9, X9
	STEP_INVERSE(q41done)
	STORE_F16(X9, 0(DI))
	STORE_F16(X12, 2(DI))
	VBROADCASTSS X10, Y10
	VBROADCASTSS X12, Y12
	LEVEL1(Y0, Y0)
	LEVEL1(Y1, Y1)
	LEVEL1(Y2, Y2)
	LEVEL1(Y3, Y3)
	VMOVUPS l15i<>(SB), Y8
	VPMINSD Y8, Y0, Y0
	VPMINSD Y8, Y1, Y1
	VPMINSD Y8, Y2, Y2
	VPMINSD Y8, Y3, Y3
	PACK_NIBBLES
	VMOVDQU X0, 4(DI)
	ADDQ    $128, SI
	ADDQ    $20, DI
	INCQ    R8
	CMPQ    R8, CX
	JB      q41loop

q41done:
	MOVQ R8, ret+24(FP)
	VZEROUPPER
	RET

// func q5_1RowsVec(dst *byte, src *float32, nb int) int
TEXT ·q5_1RowsVec(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    nb+16(FP), CX
	XORQ    R8, R8
	VMOVUPS lAbs<>(SB), Y14
	VMOVUPS packPerm<>(SB), Y15
	VMOVUPS lHalf<>(SB), Y13
	TESTQ   CX, CX
	JZ      q51done

q51loop:
	MIN_MAX(q51done)
	VDIVSS l31f<>(SB), X9, X9
	STEP_INVERSE(q51done)
	STORE_F16(X9, 0(DI))
	STORE_F16(X12, 2(DI))
	VBROADCASTSS X10, Y10
	VBROADCASTSS X12, Y12
	LEVEL1(Y0, Y0)
	LEVEL1(Y1, Y1)
	LEVEL1(Y2, Y2)
	LEVEL1(Y3, Y3)
	HIGH_BITS
	MOVL    BX, 4(DI)
	VMOVUPS l15i<>(SB), Y8
	VPAND   Y8, Y0, Y0
	VPAND   Y8, Y1, Y1
	VPAND   Y8, Y2, Y2
	VPAND   Y8, Y3, Y3
	PACK_NIBBLES
	VMOVDQU X0, 8(DI)
	ADDQ    $128, SI
	ADDQ    $24, DI
	INCQ    R8
	CMPQ    R8, CX
	JB      q51loop

q51done:
	MOVQ R8, ret+24(FP)
	VZEROUPPER
	RET
