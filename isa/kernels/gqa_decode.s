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
.include "contiguous.inc"

; ---------------------------------------------------------------- SRAM
KV_TILE_BUFFERS
.sram MERGE_BUF, SPLITS * REC_BYTES if SPLITS > 1 and SPLIT == 0 else 0

; ---------------------------------------------------------------- program
    CONFIGURE
    CONTIGUOUS_SETUP
    LOAD_LENGTHS
    PARTIAL_INIT

    LOOPI BATCH, batch_done
    TOKEN_RANGE
    PARTIAL_BEGIN
    SEQUENCE_BEGIN
    LOOPI NHEADS, head_done
    HEAD_BEGIN
    HEAD_POINTERS
    LOAD_NEXT ka, va, ksa, vsa, n     ; prologue: first tile into buffer set A
    LOOP pairs, tiles_done
    STEP ka, va, ksa, vsa, kb, vb, ksb, vsb
    STEP kb, vb, ksb, vsb, ka, va, ksa, vsa
tiles_done:
    HEAD_END
    NEXT_HEAD
head_done:
    NEXT_SEQUENCE
batch_done:
    MERGE_PHASE
    HALT
