; Multi-head latent attention decode (DeepSeek-V2 MLA, weight-absorbed form).
;
; All GROUP query heads attend to one shared latent cache: row t holds the compressed KV
; (KV_LORA elements) followed by the decoupled RoPE key (ROPE elements). The host sends the
; absorbed queries [GROUP, KV_LORA + ROPE] (q_nope already multiplied by W_UK, then q_rope) and
; receives latent outputs [GROUP, KV_LORA] (it applies W_UV itself). Scores use the whole row;
; values are the row's first KV_LORA elements, read from the same SRAM tile (V_PITCH = QK_DIM),
; so each latent row crosses the DRAM interface once per step.
;
; Contiguous cache (default): row t of sequence b at K_ADDR + b*BATCH_STRIDE + t*TOKEN_STRIDE.
; Paged cache (BLOCK_TOKENS > 0): row t of page p at K_ADDR + p*PAGE_STRIDE + t*TOKEN_STRIDE,
; pages through block tables as in paged_gqa_decode.s. Scales (int8/fp8) from KS_ADDR alike.

; ---------------------------------------------------------------- parameters
.default BATCH = 1
.default GROUP = 16               ; query heads
.default QK_DIM = 576             ; kv_lora_rank + qk_rope_head_dim
.default V_DIM = 512              ; kv_lora_rank
.default KV_DTYPE = fp16
.default SCALE_GROUP = 0
.default IO_DTYPE = fp32
.default SM_SCALE = 1 / sqrt(192) ; DeepSeek-V2: 1/sqrt(qk_nope_head_dim + qk_rope_head_dim)
.default WINDOW = 0
.default BLOCK_TOKENS = 0         ; 0 = contiguous cache
.default TILE = BLOCK_TOKENS if BLOCK_TOKENS > 0 else 32
.default MAX_BLOCKS = 256
.default CTX_CAP = 4096
.default SPLITS = 1
.default SPLIT = 0
.default KV_HEADS = 1             ; one shared latent head; present so split-K helpers can pass it
.default HEAD0 = 0
.default NHEADS = 1

.assert KV_HEADS == 1 and HEAD0 == 0 and NHEADS == 1, "MLA has a single latent KV head"
.assert BLOCK_TOKENS == 0 or TILE == BLOCK_TOKENS, "a paged tile is one page"
.const V_PITCH = QK_DIM
.const ROW_ELEMS = QK_DIM
.const TRANSFERS_PER_TILE = 2     ; latent rows and their scales
.include "common.inc"

.default TOKEN_STRIDE = ROW_BYTES
.default S_TOKEN_STRIDE = SROW_BYTES
.default BATCH_STRIDE = CTX_CAP * TOKEN_STRIDE
.default S_BATCH_STRIDE = CTX_CAP * S_TOKEN_STRIDE
.default PAGE_STRIDE = BLOCK_TOKENS * TOKEN_STRIDE
.default S_PAGE_STRIDE = BLOCK_TOKENS * S_TOKEN_STRIDE
.default LENS_ADDR = 0
.default BT_ADDR = 4096
.default K_ADDR = BT_ADDR + align(BATCH * MAX_BLOCKS * 4, 4096)
.default KS_ADDR = K_ADDR + BATCH * max(BATCH_STRIDE, MAX_BLOCKS * PAGE_STRIDE)
.default PART_ADDR = KS_ADDR + BATCH * max(S_BATCH_STRIDE, MAX_BLOCKS * S_PAGE_STRIDE)

; ---------------------------------------------------------------- SRAM
.sram Q_BUF, GROUP * QK_DIM * 4
.sram S_BUF, GROUP * TILE * 4
.sram MN_BUF, GROUP * 4
.sram REC, REC_BYTES
.sram KA, TILE * ROW_BYTES
.sram KB, TILE * ROW_BYTES
.sram KSA, TILE * SROW_BYTES
.sram KSB, TILE * SROW_BYTES
.sram LENS, BATCH * 4
.sram BT, MAX_BLOCKS * 4 if BLOCK_TOKENS > 0 else 0
.sram MERGE_BUF, SPLITS * REC_BYTES if SPLITS > 1 and SPLIT == 0 else 0

; Fetch the next tile of latent rows and their scales; V is read from the same tile.
.macro LOAD_NEXT k, v, ks, vs, rows
.if BLOCK_TOKENS > 0
    LDG  \k, khead, bt, idx, page_stride, \rows, row_bytes, tok_stride
    LDG  \ks, kshead, bt, idx, spage_stride, \rows, srow_bytes, stok_stride
    ADDI idx, idx, 1
.else
    LD   \k, kp, \rows, row_bytes, tok_stride
    LD   \ks, ksp, \rows, srow_bytes, stok_stride
    ADD  kp, kp, tile_stride
    ADD  ksp, ksp, stile_stride
.endif
.endm

; ---------------------------------------------------------------- program
    CONFIGURE
    LI tok_stride, TOKEN_STRIDE
    LI stok_stride, S_TOKEN_STRIDE
    LI ka, KA
    LI kb, KB
    LI ksa, KSA
    LI ksb, KSB
.if BLOCK_TOKENS > 0
    CFG.PAGE BLOCK_TOKENS
    LI page_stride, PAGE_STRIDE
    LI spage_stride, S_PAGE_STRIDE
    LI bt, BT
    LI bt_ptr, BT_ADDR
    LI bt_bytes, MAX_BLOCKS * 4
    LI khead, K_ADDR
    LI kshead, KS_ADDR
.else
    LI tile_stride, TILE * TOKEN_STRIDE
    LI stile_stride, TILE * S_TOKEN_STRIDE
    LI batch_stride, BATCH_STRIDE
    LI sbatch_stride, S_BATCH_STRIDE
    LI kbatch, K_ADDR
    LI ksbatch, KS_ADDR
.endif
    LOAD_LENGTHS
    PARTIAL_INIT

    LOOPI BATCH, batch_done
    TOKEN_RANGE
    PARTIAL_BEGIN
    HEAD_BEGIN
.if BLOCK_TOKENS > 0
    LD   bt, bt_ptr, one, bt_bytes, bt_bytes
    WAIT 0
    ADD  bt_ptr, bt_ptr, bt_bytes
    DIVI idx, pos0, BLOCK_TOKENS
.else
    MUL  t0, pos0, tok_stride
    ADD  kp, kbatch, t0
    MUL  t0, pos0, stok_stride
    ADD  ksp, ksbatch, t0
    ADD  kbatch, kbatch, batch_stride
    ADD  ksbatch, ksbatch, sbatch_stride
.endif
    LOAD_NEXT ka, ka, ksa, ksa, n
    LOOP pairs, tiles_done
    STEP ka, ka, ksa, ksa, kb, kb, ksb, ksb
    STEP kb, kb, ksb, ksb, ka, ka, ksa, ksa
tiles_done:
    HEAD_END
batch_done:
    MERGE_PHASE
    HALT
