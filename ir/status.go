package ir

// The status codes every generated entry point returns (ABI: DESIGN §4):
// 0 on success, a negative code for bad input, in which case nothing was
// written to the outputs. Statuses is the one table behind the kernels'
// return values, <PREFIX>_<NAME> in the header, the manifest's errors,
// <prefix>_strerror and the table in docs/abi.md (a test compares them).
const (
	StatusOK               = 0
	StatusBadArgument      = -1
	StatusBadQOIndptr      = -2
	StatusBadKVIndptr      = -3
	StatusBadLastPageLen   = -4
	StatusBadPageID        = -5
	StatusQLenExceedsKVLen = -6
	StatusNoMemory         = -7
	StatusLaunchFailed     = -8
	StatusBadKVLen         = -9
	StatusBadSlot          = -10
	StatusBadLength        = -11
	StatusBadMaskIndptr    = -12
	StatusTooLarge         = -13
	StatusCPULevel         = -14
)

// StatusOKMessage is what <prefix>_strerror(0) returns.
const StatusOKMessage = "success"

// Statuses lists every nonzero status with its name (the header's
// <PREFIX>_<NAME> in upper case) and message, in code order.
var Statuses = []ErrorCode{
	{Code: StatusBadArgument, Name: "bad_argument", Msg: "a size argument (batch_size, num_pages, max_blocks, n, rope_positions or a param dimension) is negative, or a RoPE position lies outside 0..rope_positions-1"},
	{Code: StatusBadQOIndptr, Name: "bad_qo_indptr", Msg: "qo_indptr must start at or above 0, be non-decreasing and give each sequence at most 2^30 tokens"},
	{Code: StatusBadKVIndptr, Name: "bad_kv_indptr", Msg: "kv_indptr (compact_copy: copy_indptr; prefill_ragged: kv_token_indptr) must start at or above 0 and be non-decreasing"},
	{Code: StatusBadLastPageLen, Name: "bad_last_page_len", Msg: "kv_last_page_len must be in 1..page_size for a sequence with pages"},
	{Code: StatusBadPageID, Name: "bad_page_id", Msg: "a page id is neither -1 (a hidden page or block) nor in 0..num_pages-1 (gather_pages, scatter_pages: in 0..num_pages-1, each at most once in scatter_pages)"},
	{Code: StatusQLenExceedsKVLen, Name: "q_len_exceeds_kv_len", Msg: "a sequence has more query tokens than cached tokens (q_len > kv_len)"},
	{Code: StatusNoMemory, Name: "no_memory", Msg: "scratch memory allocation failed"},
	{Code: StatusLaunchFailed, Name: "launch_failed", Msg: "(CUDA) the runtime reported an error launching a kernel"},
	{Code: StatusBadKVLen, Name: "bad_kv_len", Msg: "a sequence's kv_len must be in 0..2^30 (block tables: kv_lens in 0..max_blocks*page_size; prefill_ragged: its ragged row count)"},
	{Code: StatusBadSlot, Name: "bad_slot", Msg: "a slot (a position_map of append, qkv_append or read_kv; compact_copy's copy_src, copy_dst) is outside 0..num_pages*page_size-1 (a position_map may hold -1)"},
	{Code: StatusBadLength, Name: "bad_length", Msg: "copy_page length must be in 0..page_size"},
	{Code: StatusBadMaskIndptr, Name: "bad_mask_indptr", Msg: "tree_order_indptr must start at or above 0, be non-decreasing and give each sequence q_len of the total_q rows; mask_indptr likewise with enough bytes for q_len*kv_len bits"},
	{Code: StatusTooLarge, Name: "too_large", Msg: "the call needs more than 2^31-1 work items (batch_size x kv_heads x query tiles, or n x heads): split it"},
	{Code: StatusCPULevel, Name: "cpu_level", Msg: "(CPU) this CPU runs none of the levels these kernels were built for, or ATTNC_CPU_LEVEL names no CPU level of them or one this CPU cannot run"},
}
