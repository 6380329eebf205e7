/* Micro-kernels for tests/target/test_cycles_qemu.py: each a function whose estimated cycles
 * (deployer/cycles.py over QEMU's trace) the test compares with a hand count from the core's
 * timing table. A bare-metal program for the QEMU boards: the vector table, then reset, which
 * enables the FPU/MVE, calls every kernel with r0 = DATA (a RAM buffer whose first word points
 * at itself) and exits through semihosting. Built with -DSTACK_TOP=... -DDATA=... [-DMVE]. */
    .syntax unified
    .thumb
    .text

.macro FUNC name
    .align 2
    .global \name
    .thumb_func
    .type \name, %function
\name:
.endm
.macro END name
    .size \name, . - \name
.endm

vectors:
    .word STACK_TOP
    .word reset
    .rept 14
    .word fault
    .endr

FUNC reset
    ldr r1, =0xE000ED88         /* CPACR: full access to CP10 and CP11 (FPU, MVE) */
    ldr r2, [r1]
    orr r2, r2, #0xF00000
    str r2, [r1]
    dsb
    isb
    ldr r0, =DATA
    str r0, [r0]                /* DATA[0] = DATA: the dependent loads chase it */
    bl k_loads_independent
    ldr r0, =DATA
    bl k_loads_dependent
    ldr r0, =DATA
    bl k_branches
    ldr r0, =DATA
    bl k_smlad
    ldr r0, =DATA
    bl k_multiple
    ldr r0, =DATA
    bl k_address_stall
#ifdef MVE
    ldr r0, =DATA
    bl k_mve
    ldr r0, =DATA
    bl k_mve_loop
#endif
    movs r0, #0x18              /* SYS_EXIT, ADP_Stopped_ApplicationExit: status 0 */
    ldr r1, =0x20026
    bkpt 0xab
END reset

FUNC fault
    movs r0, #0x18              /* SYS_EXIT, ADP_Stopped_RunTimeErrorUnknown: status 1 */
    ldr r1, =0x20023
    bkpt 0xab
END fault
    .ltorg

/* four independent loads back to back */
FUNC k_loads_independent
    ldr r1, [r0]
    ldr r2, [r0, #4]
    ldr r3, [r0, #8]
    ldr r12, [r0, #12]
    bx lr
END k_loads_independent

/* each load's address is the one before's result */
FUNC k_loads_dependent
    ldr r1, [r0]
    ldr r2, [r1]
    ldr r3, [r2]
    bx lr
END k_loads_dependent

/* ten iterations: a forward branch taken once (r1 == 5), a backward one taken nine times */
FUNC k_branches
    movs r1, #10
1:  subs r1, r1, #1
    cmp r1, #5
    beq 2f
    nop
2:  cmp r1, #0
    bne 1b
    bx lr
END k_branches

/* an SMLAD chain on one accumulator */
FUNC k_smlad
    ldr r2, [r0]
    ldr r3, [r0, #4]
    movs r1, #0
    smlad r1, r2, r3, r1
    smlad r1, r2, r3, r1
    smlad r1, r2, r3, r1
    smlad r1, r2, r3, r1
    bx lr
END k_smlad

/* PUSH, LDM, STM and POP with the return */
FUNC k_multiple
    push {r4, r5, r6, lr}
    ldm r0, {r1, r2, r3}
    stm r0, {r1, r2}
    pop {r4, r5, r6, pc}
END k_multiple

/* a load whose address the instruction before computed, a store after the load */
FUNC k_address_stall
    adds r1, r0, #4
    ldr r2, [r1]
    str r2, [r0, #8]
    bx lr
END k_address_stall

#ifdef MVE
/* Helium: two loads on the load/store pipe, then loads and multiply-accumulates alternating */
FUNC k_mve
    movs r2, #0
    vldrb.u8 q0, [r0]
    vldrb.u8 q1, [r0, #16]
    vmladava.s8 r2, q0, q1
    vldrb.u8 q2, [r0, #32]
    vmladava.s8 r2, q2, q1
    bx lr
END k_mve

/* a low-overhead loop of four iterations */
FUNC k_mve_loop
    push {lr}
    movs r2, #0
    movs r3, #4
    dls lr, r3
1:  vldrb.u8 q0, [r0], #16
    vmladava.s8 r2, q0, q0
    le lr, 1b
    pop {pc}
END k_mve_loop
#endif
