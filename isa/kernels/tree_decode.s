; Multi-token attention over a contiguous KV cache: speculative verification, tree and beam steps.
;
; The last QTOKENS keys of every sequence are new tokens (a draft's proposals, a tree's nodes), each
; with a query. New token i sees every committed key and, among the new ones, itself and its ancestors
; in a tree given by its parents (PAR_ADDR: int32 per new token, -1 = the committed prefix, parents
; listed before their children; a chain -1, 0, 1, ... is the causal mask of verification). The
; committed prefix is streamed once for all QTOKENS x GROUP query rows -- so its DRAM bytes do not grow
; with QTOKENS -- in double-buffered tiles with one online softmax per row; then the QTOKENS new K/V
; rows, loaded to SRAM with the first tile, are attended key by key along each token's ancestor chain
; (CHAIN_ADDR: int32 per new token, its depth + 1), walking PAR in SRAM with LDR.
;
; Why no mask opcode: MASK hides keys by one query position for all rows, which is a causal mask but
; not a tree (a branch would see its siblings). The datapath's row count (CFG.SHAPE group) is a
; configuration register, so the kernel attends the prefix with QTOKENS x GROUP rows and each new
; key with the GROUP rows of one token, pointing QK..PV at that token's slice of the running records.
;
; Host stream per sequence, per KV head of the unit: QTOKENS x GROUP query vectors (token-major, then
; query head) in; the same order of outputs out. DRAM layout as gqa_decode.s ([batch][head][token][dim]
; by default); split-K splits the prefix, and split 0 attends the new tokens before the merge.

; ---------------------------------------------------------------- parameters
.default BATCH = 1
.default KV_HEADS = 1
.default HEAD0 = 0
.default NHEADS = KV_HEADS - HEAD0
.default GROUP = 1                ; query heads per KV head
.default QTOKENS = 1              ; new (query) tokens per sequence
.default HEAD_DIM = 128
.default KV_DTYPE = fp16
.default SCALE_GROUP = 0
.default IO_DTYPE = fp32
.default SM_SCALE = 1 / sqrt(HEAD_DIM)
.default WINDOW = 0               ; must stay 0: the tree decides what a new token sees
.default TILE = 64
.default CTX_CAP = 4096
.default SPLITS = 1
.default SPLIT = 0

.const ROWS = GROUP * QTOKENS
.const NEW_TOKENS = QTOKENS
.const QK_DIM = HEAD_DIM
.const V_DIM = HEAD_DIM
.const V_PITCH = HEAD_DIM
.const ROW_ELEMS = HEAD_DIM
.const TRANSFERS_PER_TILE = 4
.assert QTOKENS >= 1, "QTOKENS must be positive"
.assert WINDOW == 0, "a sliding window does not apply to tree attention"
.include "common.inc"

.default LENS_ADDR = 0
.default PAR_ADDR = 64 * cdiv(LENS_ADDR + 4 * BATCH, 64)      ; after the lengths
.default CHAIN_ADDR = PAR_ADDR + 4 * QTOKENS
.default K_ADDR = 4096 * cdiv(CHAIN_ADDR + 4 * QTOKENS, 4096)
.include "contiguous.inc"

; ---------------------------------------------------------------- SRAM
KV_TILE_BUFFERS
.sram MERGE_BUF, SPLITS * REC_BYTES if SPLITS > 1 and SPLIT == 0 else 0
.sram KN, QTOKENS * ROW_BYTES if SPLIT == 0 else 0      ; the new tokens' K / V rows and scales
.sram VN, QTOKENS * ROW_BYTES if SPLIT == 0 else 0
.sram KSN, QTOKENS * SROW_BYTES if SPLIT == 0 else 0
.sram VSN, QTOKENS * SROW_BYTES if SPLIT == 0 else 0
.sram PAR, QTOKENS * 4 if SPLIT == 0 else 0
.sram CHAIN, QTOKENS * 4 if SPLIT == 0 else 0

; The new-token walk runs after a head's tiles, when the tile registers are free again
; (HEAD_BEGIN and the prologue set them afresh), and uses the paged kernels' registers.
.reg qrows = r57            ; QTOKENS
.reg qtok = r58             ; SRAM: token i's GROUP query rows, and its slices of mn, m, l, acc
.reg mntok = r59
.reg mtok = r60
.reg ltok = r61
.reg acctok = r62
.reg chp = r12              ; SRAM: next chain length (was pairs)
.reg cnt = r13              ; keys on token i's chain (was tile; reloaded below)
.reg j = r14                ; the new key being attended: i, then its parent, ... (was kp)
.reg kj = r15               ; SRAM rows of key j (were vp, ksp, vsp, pos)
.reg vj = r16
.reg ksj = r17
.reg vsj = r9

; The QTOKENS new rows of K, V and their scales, from token len (the prefix length) on. Issued before
; the first tile: transfers complete in order, so the tiles' WAITs also cover them.
.macro LOAD_ROWS sram, head, bytes, stride
    MUL t0, len, \stride
    ADD t1, \head, t0
    LI  t0, \sram
    LD  t0, t1, qrows, \bytes, \stride
.endm

.macro LOAD_NEW
    LOAD_ROWS KN, khead, row_bytes, tok_stride
    LOAD_ROWS VN, vhead, row_bytes, tok_stride
    LOAD_ROWS KSN, kshead, srow_bytes, stok_stride
    LOAD_ROWS VSN, vshead, srow_bytes, stok_stride
.endm

; Every new token attends its ancestor chain, one key at a time, with the GROUP rows of that token.
.macro ATTEND_NEW
    WAIT  0
    CFG.SHAPE QK_DIM, V_DIM, V_PITCH, GROUP
    ADD   qtok, q, r0
    ADD   mntok, mn, r0
    ADD   mtok, m, r0
    ADD   ltok, l, r0
    ADD   acctok, acc, r0
    LI    chp, CHAIN
    ADD   j, r0, r0
    LOOPI QTOKENS, new_tokens_done\@
    LDR   cnt, chp, 0
    ADDI  chp, chp, 4
    ADD   t1, j, r0                 ; t1 = i (j walks up from it)
    LOOP  cnt, chain_done\@
    MULI  t0, j, ROW_BYTES
    ADDI  kj, t0, KN
    ADDI  vj, t0, VN
    MULI  t0, j, SROW_BYTES
    ADDI  ksj, t0, KSN
    ADDI  vsj, t0, VSN
    QK    s, qtok, kj, ksj, one
    VMAX  mntok, s, mtok, one
    VEXP  s, mntok, one
    VRESC acctok, ltok, mtok, mntok
    VSUM  ltok, s, one
    PV    acctok, s, vj, vsj, one
    MULI  t0, j, 4
    LDR   j, t0, PAR                ; j = parent(j); -1 after the root ends the chain
chain_done\@:
    ADDI  j, t1, 1                  ; the next token
    ADDI  qtok, qtok, GROUP * QK_DIM * 4
    ADDI  mntok, mntok, GROUP * 4
    ADDI  mtok, mtok, GROUP * 4
    ADDI  ltok, ltok, GROUP * 4
    ADDI  acctok, acctok, GROUP * V_DIM * 4
new_tokens_done\@:
    CFG.SHAPE QK_DIM, V_DIM, V_PITCH, ROWS
    LI    tile, TILE
.endm

; ---------------------------------------------------------------- program
    CONFIGURE
    CONTIGUOUS_SETUP
    LI qrows, QTOKENS
.if SPLIT == 0
    LI t0, PAR                        ; the tree, once for the batch (LOAD_LENGTHS waits for it)
    LI t1, PAR_ADDR
    LI lens_ptr, 4 * QTOKENS
    LD t0, t1, one, lens_ptr, lens_ptr
    LI t0, CHAIN
    LI t1, CHAIN_ADDR
    LD t0, t1, one, lens_ptr, lens_ptr
.endif
    LOAD_LENGTHS
    PARTIAL_INIT

    LOOPI BATCH, batch_done
    TOKEN_RANGE
    PARTIAL_BEGIN
    SEQUENCE_BEGIN
    LOOPI NHEADS, head_done
    HEAD_BEGIN
.if SPLIT == 0
    LOAD_NEW
.endif
    HEAD_POINTERS
    LOAD_NEXT ka, va, ksa, vsa, n
    LOOP pairs, tiles_done
    STEP ka, va, ksa, vsa, kb, vb, ksb, vsb
    STEP kb, vb, ksb, vsb, ka, va, ksa, vsa
tiles_done:
.if SPLIT == 0
    ATTEND_NEW
.endif
    HEAD_END
    NEXT_HEAD
head_done:
    NEXT_SEQUENCE
batch_done:
    MERGE_PHASE
    HALT
