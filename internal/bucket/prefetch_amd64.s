#include "textflag.h"

// func prefetch(p unsafe.Pointer)
TEXT ·prefetch(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ	p+0(FP), AX
	PREFETCHT0	(AX)
	RET

// func prefetchw(p unsafe.Pointer)
TEXT ·prefetchw(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ	p+0(FP), AX
	// PREFETCHW (AX), which the Go assembler does not name: 0F 0D /1.
	BYTE	$0x0F; BYTE $0x0D; BYTE $0x08
	RET
