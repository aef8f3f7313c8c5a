; Decode attention over a paged KV cache (vLLM-style block tables): MHA, GQA and MQA.
;
; Same contract as gqa_decode.s (host stream, window, quantized KV, split-K), but K/V live in a
; pool of pages of BLOCK_TOKENS tokens. Sequence b's logical block j is physical page
; table[b][j] (int32, MAX_BLOCKS entries per sequence at BT_ADDR). One tile is one page and is
; fetched with LDG through the block table; the partial last page is a shorter gather.
;
; Page geometry (bytes; override with -D): row t of head h in page p is at
; K_ADDR + p*PAGE_STRIDE + h*HEAD_STRIDE + t*TOKEN_STRIDE (V from V_ADDR; scales from KS_ADDR /
; VS_ADDR with the S_* strides). Defaults: pages of [head][token][dim]; [token][head][dim] is
; TOKEN_STRIDE = KV_HEADS*ROW_BYTES, HEAD_STRIDE = ROW_BYTES.

; ---------------------------------------------------------------- parameters
.default BATCH = 1
.default KV_HEADS = 1
.default HEAD0 = 0
.default NHEADS = KV_HEADS - HEAD0
.default GROUP = 1
.default HEAD_DIM = 128
.default KV_DTYPE = fp16
.default SCALE_GROUP = 0
.default IO_DTYPE = fp32
.default SM_SCALE = 1 / sqrt(HEAD_DIM)
.default WINDOW = 0
.default BLOCK_TOKENS = 16
.default MAX_BLOCKS = 256         ; block-table entries per sequence
.default SPLITS = 1
.default SPLIT = 0

.const TILE = BLOCK_TOKENS
.const QK_DIM = HEAD_DIM
.const V_DIM = HEAD_DIM
.const V_PITCH = HEAD_DIM
.const ROW_ELEMS = HEAD_DIM
.const TRANSFERS_PER_TILE = 4
.include "common.inc"

.default TOKEN_STRIDE = ROW_BYTES
.default HEAD_STRIDE = BLOCK_TOKENS * TOKEN_STRIDE
.default PAGE_STRIDE = KV_HEADS * HEAD_STRIDE
.default S_TOKEN_STRIDE = SROW_BYTES
.default S_HEAD_STRIDE = BLOCK_TOKENS * S_TOKEN_STRIDE
.default S_PAGE_STRIDE = KV_HEADS * S_HEAD_STRIDE
.default NUM_PAGES = BATCH * MAX_BLOCKS
.default LENS_ADDR = 0
.default BT_ADDR = 4096
.default K_ADDR = BT_ADDR + align(BATCH * MAX_BLOCKS * 4, 4096)
.default V_ADDR = K_ADDR + NUM_PAGES * PAGE_STRIDE
.default KS_ADDR = V_ADDR + NUM_PAGES * PAGE_STRIDE
.default VS_ADDR = KS_ADDR + NUM_PAGES * S_PAGE_STRIDE
.default PART_ADDR = VS_ADDR + NUM_PAGES * S_PAGE_STRIDE

; ---------------------------------------------------------------- SRAM
KV_TILE_BUFFERS
.sram BT, MAX_BLOCKS * 4
.sram MERGE_BUF, SPLITS * REC_BYTES if SPLITS > 1 and SPLIT == 0 else 0

; Gather the next page of K, V and their scales (rows may be 0: nothing moves).
.macro LOAD_NEXT k, v, ks, vs, rows
    LDG  \k, khead, bt, idx, page_stride, \rows, row_bytes, tok_stride
    LDG  \v, vhead, bt, idx, page_stride, \rows, row_bytes, tok_stride
    LDG  \ks, kshead, bt, idx, spage_stride, \rows, srow_bytes, stok_stride
    LDG  \vs, vshead, bt, idx, spage_stride, \rows, srow_bytes, stok_stride
    ADDI idx, idx, 1
.endm

; ---------------------------------------------------------------- program
    CONFIGURE
    CFG.PAGE BLOCK_TOKENS
    LI tok_stride, TOKEN_STRIDE
    LI stok_stride, S_TOKEN_STRIDE
    LI page_stride, PAGE_STRIDE
    LI spage_stride, S_PAGE_STRIDE
    LI head_stride, HEAD_STRIDE
    LI shead_stride, S_HEAD_STRIDE
    LI ka, KA
    LI kb, KB
    LI va, VA
    LI vb, VB
    LI ksa, KSA
    LI ksb, KSB
    LI vsa, VSA
    LI vsb, VSB
    LI bt, BT
    LI bt_ptr, BT_ADDR
    LI bt_bytes, MAX_BLOCKS * 4
    LOAD_LENGTHS
    PARTIAL_INIT

    LOOPI BATCH, batch_done
    TOKEN_RANGE
    PARTIAL_BEGIN
    LD   bt, bt_ptr, one, bt_bytes, bt_bytes     ; this sequence's block table
    WAIT 0
    ADD  bt_ptr, bt_ptr, bt_bytes
    LI   khead, K_ADDR + HEAD0 * HEAD_STRIDE
    LI   vhead, V_ADDR + HEAD0 * HEAD_STRIDE
    LI   kshead, KS_ADDR + HEAD0 * S_HEAD_STRIDE
    LI   vshead, VS_ADDR + HEAD0 * S_HEAD_STRIDE
    LOOPI NHEADS, head_done
    HEAD_BEGIN
    DIVI idx, pos0, BLOCK_TOKENS                 ; first page of the range (pos0 is page-aligned)
    LOAD_NEXT ka, va, ksa, vsa, n
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
batch_done:
    MERGE_PHASE
    HALT
