; Decode attention over a contiguous KV cache: MHA (GROUP = 1), GQA, MQA (KV_HEADS = 1).
;
; For every sequence b of the batch and every KV head h handled by this unit, the host sends the
; GROUP query vectors of that head (GROUP * HEAD_DIM elements) and receives GROUP output vectors.
; Keys are consumed in tiles of TILE tokens with an online softmax; K/V tiles are double-buffered
; (the next tile's DMA overlaps this tile's compute). Optional: sliding window (WINDOW tokens),
; quantized KV with per-block scales (KV_DTYPE, SCALE_GROUP), split-K over context across units
; (SPLITS, SPLIT; partial records merged by split 0 after a barrier).
;
; DRAM layout (bytes; override with -D): K at K_ADDR + b*BATCH_STRIDE + h*HEAD_STRIDE
; + t*TOKEN_STRIDE, V the same from V_ADDR; scales likewise with S_* strides from KS_ADDR/VS_ADDR;
; int32 sequence lengths at LENS_ADDR. The defaults are the [batch][head][token][dim] layout;
; [batch][token][head][dim] is TOKEN_STRIDE = KV_HEADS*HEAD_DIM*esize, HEAD_STRIDE = HEAD_DIM*esize.

; ---------------------------------------------------------------- parameters
.default BATCH = 1
.default KV_HEADS = 1             ; KV heads in the cache
.default HEAD0 = 0                ; first KV head handled by this unit
.default NHEADS = KV_HEADS - HEAD0   ; KV heads handled by this unit
.default GROUP = 1                ; query heads per KV head
.default HEAD_DIM = 128
.default KV_DTYPE = fp16
.default SCALE_GROUP = 0          ; elements per fp32 scale (0 = unscaled)
.default IO_DTYPE = fp32
.default SM_SCALE = 1 / sqrt(HEAD_DIM)
.default WINDOW = 0               ; sliding window in tokens (0 = full context)
.default TILE = 64                ; tokens per tile
.default CTX_CAP = 4096           ; token capacity per sequence (default strides)
.default SPLITS = 1
.default SPLIT = 0

.const QK_DIM = HEAD_DIM
.const V_DIM = HEAD_DIM
.const V_PITCH = HEAD_DIM
.const ROW_ELEMS = HEAD_DIM
.const TRANSFERS_PER_TILE = 4     ; K, V, K scales, V scales
.include "common.inc"

.default TOKEN_STRIDE = ROW_BYTES
.default HEAD_STRIDE = CTX_CAP * TOKEN_STRIDE
.default BATCH_STRIDE = KV_HEADS * HEAD_STRIDE
.default S_TOKEN_STRIDE = SROW_BYTES
.default S_HEAD_STRIDE = CTX_CAP * S_TOKEN_STRIDE
.default S_BATCH_STRIDE = KV_HEADS * S_HEAD_STRIDE
.default LENS_ADDR = 0
.default K_ADDR = 4096
.default V_ADDR = K_ADDR + BATCH * BATCH_STRIDE
.default KS_ADDR = V_ADDR + BATCH * BATCH_STRIDE
.default VS_ADDR = KS_ADDR + BATCH * S_BATCH_STRIDE
.default PART_ADDR = VS_ADDR + BATCH * S_BATCH_STRIDE

; ---------------------------------------------------------------- SRAM
.sram Q_BUF, GROUP * QK_DIM * 4
.sram S_BUF, GROUP * TILE * 4
.sram MN_BUF, GROUP * 4
.sram REC, REC_BYTES
.sram KA, TILE * ROW_BYTES
.sram KB, TILE * ROW_BYTES
.sram VA, TILE * ROW_BYTES
.sram VB, TILE * ROW_BYTES
.sram KSA, TILE * SROW_BYTES
.sram KSB, TILE * SROW_BYTES
.sram VSA, TILE * SROW_BYTES
.sram VSB, TILE * SROW_BYTES
.sram LENS, BATCH * 4
.sram MERGE_BUF, SPLITS * REC_BYTES if SPLITS > 1 and SPLIT == 0 else 0

; Issue one tile of K, V and their scales (rows may be 0) and advance the DRAM pointers.
.macro LOAD_NEXT k, v, ks, vs, rows
    LD  \k, kp, \rows, row_bytes, tok_stride
    LD  \v, vp, \rows, row_bytes, tok_stride
    LD  \ks, ksp, \rows, srow_bytes, stok_stride
    LD  \vs, vsp, \rows, srow_bytes, stok_stride
    ADD kp, kp, tile_stride
    ADD vp, vp, tile_stride
    ADD ksp, ksp, stile_stride
    ADD vsp, vsp, stile_stride
.endm

; ---------------------------------------------------------------- program
    CONFIGURE
    LI tok_stride, TOKEN_STRIDE
    LI stok_stride, S_TOKEN_STRIDE
    LI tile_stride, TILE * TOKEN_STRIDE
    LI stile_stride, TILE * S_TOKEN_STRIDE
    LI head_stride, HEAD_STRIDE
    LI shead_stride, S_HEAD_STRIDE
    LI batch_stride, BATCH_STRIDE
    LI sbatch_stride, S_BATCH_STRIDE
    LI ka, KA
    LI kb, KB
    LI va, VA
    LI vb, VB
    LI ksa, KSA
    LI ksb, KSB
    LI vsa, VSA
    LI vsb, VSB
    LI kbatch, K_ADDR + HEAD0 * HEAD_STRIDE
    LI vbatch, V_ADDR + HEAD0 * HEAD_STRIDE
    LI ksbatch, KS_ADDR + HEAD0 * S_HEAD_STRIDE
    LI vsbatch, VS_ADDR + HEAD0 * S_HEAD_STRIDE
    LOAD_LENGTHS
    PARTIAL_INIT

    LOOPI BATCH, batch_done
    TOKEN_RANGE
    PARTIAL_BEGIN
    ADD khead, kbatch, r0
    ADD vhead, vbatch, r0
    ADD kshead, ksbatch, r0
    ADD vshead, vsbatch, r0
    LOOPI NHEADS, head_done
    HEAD_BEGIN
    MUL t0, pos0, tok_stride          ; DRAM pointers at the first token of the range
    ADD kp, khead, t0
    ADD vp, vhead, t0
    MUL t0, pos0, stok_stride
    ADD ksp, kshead, t0
    ADD vsp, vshead, t0
    LOAD_NEXT ka, va, ksa, vsa, n     ; prologue: first tile into buffer set A
    LOOP pairs, tiles_done
    STEP ka, va, ksa, vsa, kb, vb, ksb, vsb
    STEP kb, vb, ksb, vsb, ka, va, ksa, vsa
tiles_done:
    HEAD_END
    ADD khead, khead, head_stride
    ADD vhead, vhead, head_stride
    ADD kshead, kshead, shead_stride
    ADD vshead, vshead, shead_stride
head_done:
    ADD kbatch, kbatch, batch_stride
    ADD vbatch, vbatch, batch_stride
    ADD ksbatch, ksbatch, sbatch_stride
    ADD vsbatch, vsbatch, sbatch_stride
batch_done:
    MERGE_PHASE
    HALT
