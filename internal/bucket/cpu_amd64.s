#include "textflag.h"

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT|NOFRAME, $0-24
	MOVL	leaf+0(FP), AX
	MOVL	sub+4(FP), CX
	CPUID
	MOVL	AX, eax+8(FP)
	MOVL	BX, ebx+12(FP)
	MOVL	CX, ecx+16(FP)
	MOVL	DX, edx+20(FP)
	RET

// func rdpid() uint32
TEXT ·rdpid(SB), NOSPLIT|NOFRAME, $0-4
	// RDPID AX, which the Go assembler does not name: F3 0F C7 /7.
	BYTE	$0xF3; BYTE $0x0F; BYTE $0xC7; BYTE $0xF8
	MOVL	AX, ret+0(FP)
	RET

// func rdtscpAux() uint32
TEXT ·rdtscpAux(SB), NOSPLIT|NOFRAME, $0-4
	RDTSCP
	MOVL	CX, ret+0(FP)
	RET
