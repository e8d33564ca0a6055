// attnc_cuda_emu.h — runs attnc-generated CUDA kernels on the CPU.
//
// The attnc prelude includes this header instead of the CUDA headers when
// ATTNC_EMULATE is defined; the same <variant>.cu then compiles as C++17:
//
//   g++ -std=c++17 -O1 -fno-strict-aliasing -x c++ -DATTNC_EMULATE -I<dir of this header>
//     -shared -fPIC k.cu -o k.so -lpthread
//
// It defines every name of the attnc prelude (codegen/cuda/prelude.go) for
// the CPU. Model:
//
//  - ATTNC_LAUNCH runs the grid synchronously before it returns (the stream
//    is ignored). Blocks are spread over a few OS threads (std::thread, at
//    most hardware_concurrency or $ATTNC_EMU_THREADS, never the caller's
//    thread); within a block every CUDA thread is a user-space fiber with its
//    own stack (256 KiB or $ATTNC_EMU_STACK_KB, a PROT_NONE guard page below
//    it), scheduled cooperatively by its OS thread: a fiber runs until it
//    blocks at a barrier or returns.
//  - A phase is the code between two attnc_sync()s. Phase p of block b runs
//    its fibers in reverse thread order when p + b is even and in thread
//    order otherwise (block 0 starts in reverse), so a missing barrier lets a
//    thread read shared memory a neighbour has not written yet (or has
//    already overwritten) in at least some blocks and phases.
//  - Dynamic shared memory is filled with 0xFF (a NaN pattern) at every block
//    start and ends exactly at a PROT_NONE guard page.
//  - A warp has ATTNC_EMU_LANES lanes (define it before including this
//    header; default 32). 32 models NVIDIA GPUs: CUDA's mma, ldmatrix and
//    cp.async names are defined, with a 48 KiB default and a 227 KiB opt-in
//    limit of dynamic shared memory per block. 64 models AMD CDNA3 (gfx942)
//    wavefronts: the MFMA names (attnc_mfma_f16, attnc_mfma_bf16) are defined
//    instead, and a block gets at most 64 KiB of LDS. Shuffles exchange values
//    across all lanes of the warp either way.
//  - attnc_sync() waits until every thread of the block has arrived. A thread
//    that returns while others wait (or will wait) at a barrier, a warp
//    operation that not all lanes of the warp reach, lanes of a warp in
//    different warp operations, and warp operations in a partial warp make
//    the launch fail:
//    a message goes to stderr (and attnc_emu_last_message()), the remaining
//    blocks are skipped and attnc_last_error() returns nonzero.
//    ATTNC_EMU_QUIET=1 keeps such messages off stderr.
//  - Warp shuffles, mma, mfma and ldmatrix exchange values through per-warp slots
//    between two warp barriers; ldmatrix hands out fragments lane by lane as
//    the PTX ISA defines them (see Sched::ldmatrix) and checks that every row
//    address in use is 16-byte aligned and inside the block's shared memory.
//  - cp.async (attnc_cp_async16*) is asynchronous until the
//    attnc_cp_async_wait<N>/wait_all that guarantees it: the destination reads
//    as 0xFF bytes (NaN) from the issue until then, the copy lands at that wait
//    (never at a barrier), and copies still in flight when a thread returns
//    never land (see Sched::cp_async).
//
// Context switches use a 15-instruction assembly routine on x86-64 (about ten
// times faster than swapcontext, which makes a system call per switch) and
// ucontext (getcontext/makecontext/swapcontext) elsewhere or when
// ATTNC_EMU_UCONTEXT is defined.
//
// Everything except the prelude names lives in an anonymous namespace, so
// several emulated libraries can be loaded into one process side by side.
#ifndef ATTNC_CUDA_EMU_H_
#define ATTNC_CUDA_EMU_H_

#if !defined(__cplusplus) || __cplusplus < 201703L
#error "attnc_cuda_emu.h needs C++17 (g++ -std=c++17)"
#endif

#ifndef ATTNC_EMU_LANES
#define ATTNC_EMU_LANES 32
#endif
#if ATTNC_EMU_LANES != 32 && ATTNC_EMU_LANES != 64
#error "ATTNC_EMU_LANES must be 32 (NVIDIA warps) or 64 (AMD CDNA wavefronts)"
#endif

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <new>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__ELF__) && !defined(ATTNC_EMU_UCONTEXT)
#define ATTNC_EMU_FAST_SWITCH 1
// attnc_emu_switch(save, load): pushes the callee-saved registers, stores the
// stack pointer in *save, switches to the stack load and pops them there.
// Weak and hidden: one copy per shared object, however many TUs include this.
extern "C" __attribute__((visibility("hidden"))) void attnc_emu_switch(void **save, void *load);
__asm__(".pushsection .text\n"
        ".p2align 4\n"
        ".weak attnc_emu_switch\n"
        ".hidden attnc_emu_switch\n"
        ".type attnc_emu_switch,@function\n"
        "attnc_emu_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size attnc_emu_switch, .-attnc_emu_switch\n"
        ".popsection\n");
#else
#define ATTNC_EMU_FAST_SWITCH 0
#endif

namespace attnc_emu {
namespace {

// ---- errors -------------------------------------------------------------

// CUDA's numbers, so that messages read the same on both sides.
enum {
  kErrInvalidValue = 1,          // cudaErrorInvalidValue
  kErrMemoryAllocation = 2,      // cudaErrorMemoryAllocation
  kErrInvalidConfiguration = 9,  // cudaErrorInvalidConfiguration
  kErrLaunchFailure = 719,       // cudaErrorLaunchFailure
};

// Lanes per warp (wavefront).
const int kLanes = ATTNC_EMU_LANES;

#if ATTNC_EMU_LANES == 32
const int kDefaultSmem = 48 * 1024;  // without attnc_set_smem
const int kMaxSmem = 227 * 1024;     // sm_90 opt-in limit per block
#else
const int kDefaultSmem = 64 * 1024;  // CDNA3: 64 KiB of LDS per workgroup
const int kMaxSmem = 64 * 1024;
#endif
const int kMaxThreads = 1024;

std::atomic<int> g_last_error{0};
std::mutex g_msg_mu;
char g_msg[1024];

void set_error(int code) {
  int zero = 0;
  g_last_error.compare_exchange_strong(zero, code);
}

void vreport(int code, const char *fmt, va_list ap) {
  char buf[sizeof g_msg];
  vsnprintf(buf, sizeof buf, fmt, ap);
  {
    std::lock_guard<std::mutex> lk(g_msg_mu);
    memcpy(g_msg, buf, sizeof buf);
  }
  const char *quiet = getenv("ATTNC_EMU_QUIET");
  if (!quiet || !*quiet) fprintf(stderr, "%s\n", buf);
  set_error(code);
}

__attribute__((format(printf, 2, 3))) void report(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(code, fmt, ap);
  va_end(ap);
}

int env_int(const char *name, int def, int lo, int hi) {
  const char *s = getenv(name);
  if (!s || !*s) return def;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v < lo || v > hi) return def;
  return (int)v;
}

size_t page_size() {
  static const size_t ps = (size_t)sysconf(_SC_PAGESIZE);
  return ps;
}

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// ---- half precision (exact, round-to-nearest-even) ------------------------

inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) {
    if (m == 0) return bits_f32(sign);
    int sh = 0;  // subnormal: normalize
    while (!(m & 0x400)) {
      m <<= 1;
      sh++;
    }
    m &= 0x3ff;
    return bits_f32(sign | ((uint32_t)(113 - sh) << 23) | (m << 13));
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));  // inf, NaN (payload kept)
  return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));  // quiet NaN
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                                   // below 2^-14: subnormal or zero
    if (ax <= 0x33000000u) return (uint16_t)sign;           // <= 2^-25 rounds to 0
    uint32_t e = ax >> 23, mant = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // units of 2^-24
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ff);
  uint32_t rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

inline float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

// ---- fibers ------------------------------------------------------------------

struct Ctx {
#if ATTNC_EMU_FAST_SWITCH
  void *sp = nullptr;
#else
  ucontext_t uc;
#endif
};

inline void ctx_switch(Ctx *from, Ctx *to) {
#if ATTNC_EMU_FAST_SWITCH
  attnc_emu_switch(&from->sp, to->sp);
#else
  swapcontext(&from->uc, &to->uc);
#endif
}

void fiber_main();

enum FiberState { kRunnable, kWaitBlock, kWaitWarp, kDone };

// One cp.async in flight: 16 bytes from src (src_bytes of them, the rest
// zeros) to dst, in commit group `group` (0: not committed yet).
struct AsyncCopy {
  unsigned char *dst;
  const unsigned char *src;
  int src_bytes;
  int group;
};

// At most this many cp.async in flight per thread (a kernel that never
// waits would otherwise grow the queue without bound).
const size_t kMaxAsyncCopies = 1 << 16;

struct Fiber {
  Ctx ctx;
  int tid = 0;
  int state = kDone;
  std::vector<AsyncCopy> copies;  // issued and not yet completed, in issue order
  int groups = 0;                 // commit groups so far
};

// Warp operations; each has two barriers (deposit, then read before reuse).
enum WarpOp {
  kOpShflXor = 1,
  kOpShflIdx = 3,
  kOpMmaF16 = 5,
  kOpMmaBF16 = 7,
  kOpLdmatrix = 9,  // + 2 * (3 * trans + log2(num)): x1 x2 x4, then their .trans
  kOpMfmaF16 = 21,
  kOpMfmaBF16 = 23,
};

const char *op_name(int tag) {  // tag is an op or op + 1
  switch ((tag - 1) / 2) {
    case (kOpShflXor - 1) / 2: return "attnc_shfl_xor";
    case (kOpShflIdx - 1) / 2: return "attnc_shfl_idx";
    case (kOpMmaF16 - 1) / 2: return "attnc_mma_f16";
    case (kOpMmaBF16 - 1) / 2: return "attnc_mma_bf16";
    case (kOpLdmatrix - 1) / 2: return "attnc_ldmatrix_x1";
    case (kOpLdmatrix + 1) / 2: return "attnc_ldmatrix_x2";
    case (kOpLdmatrix + 3) / 2: return "attnc_ldmatrix_x4";
    case (kOpLdmatrix + 5) / 2: return "attnc_ldmatrix_x1_trans";
    case (kOpLdmatrix + 7) / 2: return "attnc_ldmatrix_x2_trans";
    case (kOpLdmatrix + 9) / 2: return "attnc_ldmatrix_x4_trans";
    case (kOpMfmaF16 - 1) / 2: return "attnc_mfma_f16";
    case (kOpMfmaBF16 - 1) / 2: return "attnc_mfma_bf16";
  }
  return "?";
}

struct Warp {
  int arrived = 0;
  int tag = 0;
  uint32_t slot[kLanes];
  int32_t a[kLanes][4];
  int32_t b[kLanes][2];
  const unsigned char *row[kLanes];  // ldmatrix row addresses
};

struct Launch {
  const char *name;
  void (*body)(void *);
  void *arg;
  int grid, block;
  size_t smem;
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
};

struct Sched;
thread_local Sched *tl_sched = nullptr;

struct Sched {
  Ctx main;
  Launch *L = nullptr;
  // fibers and their stacks
  Fiber *fibers = nullptr;
  int cap = 0, n = 0;
  char *stacks = nullptr;
  size_t stacks_len = 0, stack_size = 0, slot_size = 0;
  // shared memory: [smem_map, smem_map+smem_maplen) ends with a guard page
  char *smem_map = nullptr;
  size_t smem_maplen = 0;
  unsigned char *smem = nullptr;
  size_t smem_bytes = 0;
  std::vector<Warp> warps;
  // run queue (ring of fiber indices)
  std::vector<int> q;
  int qhead = 0, qlen = 0;
  // block state
  Fiber *cur = nullptr;
  int bid = 0, phase = 0, bar_arrived = 0, ndone = 0;
  bool failed = false;

  Sched() = default;
  Sched(const Sched &) = delete;
  Sched &operator=(const Sched &) = delete;

  ~Sched() {
    delete[] fibers;
    if (stacks) munmap(stacks, stacks_len);
    if (smem_map) munmap(smem_map, smem_maplen);
  }

  bool prepare(int nthreads, size_t smem_len) {
    if (nthreads > cap) {
      size_t ps = page_size();
      size_t ss = round_up((size_t)env_int("ATTNC_EMU_STACK_KB", 256, 16, 1 << 20) * 1024, ps);
      size_t slot = ss + ps;
      size_t len = slot * (size_t)nthreads;
      void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) return false;
      for (int i = 0; i < nthreads; i++) mprotect((char *)m + slot * (size_t)i, ps, PROT_NONE);
      Fiber *fs = new (std::nothrow) Fiber[nthreads];
      if (!fs) {
        munmap(m, len);
        return false;
      }
      if (stacks) munmap(stacks, stacks_len);
      delete[] fibers;
      fibers = fs;
      stacks = (char *)m;
      stacks_len = len;
      stack_size = ss;
      slot_size = slot;
      cap = nthreads;
#if !ATTNC_EMU_FAST_SWITCH
      for (int i = 0; i < cap; i++) getcontext(&fibers[i].ctx.uc);  // once; makecontext per block
#endif
    }
    n = nthreads;
    size_t need = round_up(smem_len, 16);
    size_t ps = page_size();
    if (!smem_map || round_up(need, ps) + ps > smem_maplen) {
      size_t len = round_up(need, ps) + ps;
      void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) return false;
      mprotect((char *)m + len - ps, ps, PROT_NONE);
      if (smem_map) munmap(smem_map, smem_maplen);
      smem_map = (char *)m;
      smem_maplen = len;
    }
    smem = (unsigned char *)(smem_map + smem_maplen - ps - need);
    smem_bytes = need;
    warps.resize((size_t)(n + kLanes - 1) / kLanes);
    q.resize((size_t)n);
    return true;
  }

  void push(int i) {
    q[(size_t)((qhead + qlen) % n)] = i;
    qlen++;
  }

  Fiber *pop() {
    if (qlen == 0) return nullptr;
    int i = q[(size_t)qhead];
    qhead = (qhead + 1) % n;
    qlen--;
    return &fibers[i];
  }

  bool reverse() const { return ((phase + bid) & 1) == 0; }

  // Switches from the current fiber to the next runnable one, or to the
  // scheduler when none is.
  void switch_away() {
    Fiber *f = cur;
    Fiber *nx = pop();
    if (nx == f) return;  // the last to reach a barrier may be the first to leave it
    if (nx) {
      cur = nx;
      ctx_switch(&f->ctx, &nx->ctx);
    } else {
      ctx_switch(&f->ctx, &main);
    }
  }

  [[noreturn]] void fail_fiber(const char *fmt, ...) __attribute__((format(printf, 2, 3))) {
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    report(kErrLaunchFailure, "attnc emu: kernel %s, block %d, thread %d: %s", L->name, bid, cur->tid, buf);
    failed = true;
    L->failed.store(true);
    ctx_switch(&cur->ctx, &main);
    abort();  // never resumed
  }

  void run_block(int b) {
    bid = b;
    phase = 0;
    bar_arrived = 0;
    ndone = 0;
    failed = false;
    memset(smem, 0xFF, smem_bytes);
    for (Warp &w : warps) w.arrived = 0;
    for (int i = 0; i < n; i++) {
      Fiber &f = fibers[i];
      f.tid = i;
      f.state = kRunnable;
      f.copies.clear();
      f.groups = 0;
      char *lo = stacks + slot_size * (size_t)i + page_size();
#if ATTNC_EMU_FAST_SWITCH
      uintptr_t top = ((uintptr_t)(lo + stack_size)) & ~(uintptr_t)15;
      void **sp = (void **)top;
      *--sp = nullptr;                                 // return address of fiber_main (unused)
      *--sp = reinterpret_cast<void *>(&fiber_main);  // popped by ret
      for (int r = 0; r < 6; r++) *--sp = nullptr;     // rbp rbx r12 r13 r14 r15
      f.ctx.sp = sp;
#else
      f.ctx.uc.uc_stack.ss_sp = lo;
      f.ctx.uc.uc_stack.ss_size = stack_size;
      f.ctx.uc.uc_link = nullptr;
      makecontext(&f.ctx.uc, fiber_main, 0);
#endif
    }
    qhead = qlen = 0;
    for (int i = 0; i < n; i++) push(reverse() ? n - 1 - i : i);
    for (;;) {
      Fiber *f = pop();
      if (!f) break;
      cur = f;
      ctx_switch(&main, &f->ctx);
      if (failed) break;
    }
    cur = nullptr;
    if (!failed && ndone != n) report_deadlock();
  }

  void report_deadlock() {
    int nb = 0, nw = 0, nd = 0, fb = -1, fw = -1, fd = -1, wtag = 0;
    for (int i = 0; i < n; i++) {
      switch (fibers[i].state) {
        case kWaitBlock:
          if (nb++ == 0) fb = i;
          break;
        case kWaitWarp:
          if (nw++ == 0) {
            fw = i;
            wtag = warps[(size_t)(i / kLanes)].tag;
          }
          break;
        case kDone:
          if (nd++ == 0) fd = i;
          break;
      }
    }
    char parts[3][128] = {"", "", ""};
    if (nb) snprintf(parts[0], sizeof parts[0], "; %d thread(s) wait at attnc_sync() (first: %d)", nb, fb);
    if (nw) snprintf(parts[1], sizeof parts[1], "; %d thread(s) wait in %s (first: %d, warp %d)", nw, op_name(wtag), fw, fw / kLanes);
    if (nd) snprintf(parts[2], sizeof parts[2], "; %d thread(s) have returned (first: %d)", nd, fd);
    report(kErrLaunchFailure,
           "attnc emu: kernel %s, block %d: deadlock: a barrier that not every thread reaches "
           "(divergent attnc_sync() or warp operation)%s%s%s",
           L->name, bid, parts[0], parts[1], parts[2]);
    failed = true;
    L->failed.store(true);
  }

  // A thread that returns with cp.async in flight: nobody waited for them,
  // so their destinations stay poisoned (on a GPU the data would land at
  // some unknown time).
  void finish() {
    cur->copies.clear();
    cur->state = kDone;
    ndone++;
    switch_away();
    abort();  // a finished fiber is never resumed
  }

  void block_sync() {
    Fiber *f = cur;
    f->state = kWaitBlock;
    if (++bar_arrived == n) {
      bar_arrived = 0;
      phase++;
      for (int i = 0; i < n; i++) {
        int t = reverse() ? n - 1 - i : i;
        fibers[t].state = kRunnable;
        push(t);
      }
    }
    switch_away();
  }

  Warp &warp_enter(const char *what) {
    int w = cur->tid / kLanes;
    if ((w + 1) * kLanes > n)
      fail_fiber("%s in a partial warp (block of %d threads; warp operations need all %d lanes)", what, n, kLanes);
    return warps[(size_t)w];
  }

  void warp_barrier(Warp &W, int tag) {
    Fiber *f = cur;
    if (W.arrived == 0) {
      W.tag = tag;
    } else if (W.tag != tag) {
      fail_fiber("lanes of warp %d are in different warp operations (%s and %s)", f->tid / kLanes, op_name(W.tag),
                 op_name(tag));
    }
    if (++W.arrived == kLanes) {
      W.arrived = 0;
      int base = f->tid - f->tid % kLanes;
      for (int l = 0; l < kLanes; l++) {
        int t = base + (reverse() ? kLanes - 1 - l : l);
        if (t == f->tid) continue;
        fibers[t].state = kRunnable;
        push(t);
      }
      return;  // the last lane goes on
    }
    f->state = kWaitWarp;
    switch_away();
  }

  // 32 lanes: shfl.sync.{bfly,idx} with clamp 31 (an xor source outside the
  // warp gives the lane its own value). 64 lanes: ds_bpermute_b32, whose
  // source lane is the address's bits 2..7 (lane ^ mask and src wrap
  // modulo 64).
  uint32_t shfl(uint32_t v, int src_or_mask, int tag) {
    Warp &W = warp_enter(op_name(tag));
    int lane = cur->tid % kLanes;
    W.slot[lane] = v;
    warp_barrier(W, tag);
    int src = tag == kOpShflXor ? (lane ^ src_or_mask) : (src_or_mask & (kLanes - 1));
    if (kLanes == 64) src &= 63;
    uint32_t r = (src >= 0 && src < kLanes) ? W.slot[src] : v;  // PTX: out-of-range source gives own value
    warp_barrier(W, tag + 1);
    return r;
  }

  // mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32.
  // Fragment layout, PTX ISA 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16
  // with floating point type" (Figures 79-81 and the formulas below them):
  //   groupID = %laneid >> 2, threadID_in_group = %laneid % 4;
  //   A (16x16, row): a_i, i = 0..7 (register i/2, element i%2 in the low
  //     (even i) or high (odd i) 16 bits): row = groupID for 0 <= i < 2 ||
  //     4 <= i < 6, else groupID + 8; col = threadID_in_group*2 + (i & 1),
  //     plus 8 for i >= 4;
  //   B (16x8, col): b_i, i = 0..3: row (k) = threadID_in_group*2 + (i & 1),
  //     plus 8 for i >= 2; col (n) = groupID;
  //   C, D (16x8, f32): c_i, i = 0..3: row = groupID for i < 2, else
  //     groupID + 8; col = threadID_in_group*2 + (i & 1).
  // Products and sums are computed in double and rounded once per element.
  void mma(float d[4], const int32_t a[4], const int32_t b[2], bool bf16) {
    int tag = bf16 ? kOpMmaBF16 : kOpMmaF16;
    Warp &W = warp_enter(op_name(tag));
    int lane = cur->tid % kLanes;
    for (int i = 0; i < 4; i++) W.a[lane][i] = a[i];
    W.b[lane][0] = b[0];
    W.b[lane][1] = b[1];
    warp_barrier(W, tag);
    auto cvt = [bf16](uint32_t reg, int hi) {
      uint16_t h = (uint16_t)(hi ? reg >> 16 : reg & 0xffff);
      return (double)(bf16 ? bf16_to_f32(h) : f16_to_f32(h));
    };
    auto A = [&](int row, int k) {  // inverse of the A formulas above
      int src = (row & 7) * 4 + ((k & 7) >> 1);
      int i = ((k >> 3) << 2) | ((row >> 3) << 1) | (k & 1);
      return cvt((uint32_t)W.a[src][i >> 1], i & 1);
    };
    auto B = [&](int k, int col) {
      int src = col * 4 + ((k & 7) >> 1);
      int i = ((k >> 3) << 1) | (k & 1);
      return cvt((uint32_t)W.b[src][i >> 1], i & 1);
    };
    int g = lane >> 2, t = lane & 3;
    float out[4];
    for (int i = 0; i < 4; i++) {
      int row = g + (i >= 2 ? 8 : 0), col = t * 2 + (i & 1);
      double s = d[i];
      for (int k = 0; k < 16; k++) s += A(row, k) * B(k, col);
      out[i] = (float)s;
    }
    warp_barrier(W, tag + 1);
    for (int i = 0; i < 4; i++) d[i] = out[i];
  }

  // v_mfma_f32_16x16x16_f16 / v_mfma_f32_16x16x16_bf16 (CDNA3 ISA, "Matrix
  // Arithmetic Instructions"; the register layout AMD's matrix instruction
  // calculator prints for them) on a 64-lane wavefront: D = A*B + C with A
  // 16x16 (M x K), B 16x16 (K x N), C and D 16x16 f32. With j = lane % 16
  // and g = lane / 16, lane `lane` holds
  //   A: four elements in a[0..1], element r (0..3) = A[j][4g + r];
  //   B: four elements in b[0..1], element r = B[4g + r][j];
  //   C, D: d[r] = D[4g + r][j];
  // element r of a pair of 32-bit registers is register r/2, low 16 bits for
  // even r. Products and sums are computed in double and rounded once per
  // element.
  void mfma(float d[4], const int32_t a[2], const int32_t b[2], bool bf16) {
    int tag = bf16 ? kOpMfmaBF16 : kOpMfmaF16;
    Warp &W = warp_enter(op_name(tag));
    int lane = cur->tid % kLanes;
    W.a[lane][0] = a[0];
    W.a[lane][1] = a[1];
    W.b[lane][0] = b[0];
    W.b[lane][1] = b[1];
    warp_barrier(W, tag);
    auto cvt = [bf16](uint32_t reg, int hi) {
      uint16_t h = (uint16_t)(hi ? reg >> 16 : reg & 0xffff);
      return (double)(bf16 ? bf16_to_f32(h) : f16_to_f32(h));
    };
    auto A = [&](int row, int k) {  // inverse of the A layout above
      int src = row + 16 * (k >> 2), r = k & 3;
      return cvt((uint32_t)W.a[src][r >> 1], r & 1);
    };
    auto B = [&](int k, int col) {
      int src = col + 16 * (k >> 2), r = k & 3;
      return cvt((uint32_t)W.b[src][r >> 1], r & 1);
    };
    int j = lane & 15, g = lane >> 4;
    float out[4];
    for (int r = 0; r < 4; r++) {
      double s = d[r];
      for (int k = 0; k < 16; k++) s += A(4 * g + r, k) * B(k, j);
      out[r] = (float)s;
    }
    warp_barrier(W, tag + 1);
    for (int r = 0; r < 4; r++) d[r] = out[r];
  }

  // ---- cp.async: asynchronous until its wait -------------------------------
  //
  // PTX ISA 8.x, 9.7.9.25.3 "Data Movement and Conversion Instructions:
  // cp.async" (cp.async, cp.async.commit_group, cp.async.wait_group /
  // wait_all): a cp.async is a weak memory operation of the executing thread
  // that completes at some unknown time; cp.async.commit_group closes the
  // thread's uncommitted cp.asyncs into a cp.async-group; cp.async.wait_group N
  // waits until at most the N most recent groups are pending (all older ones
  // complete); wait_all = commit_group + wait_group 0. Nothing else (not
  // bar.sync) waits for them, and the writes are visible to other threads only
  // through a barrier after the wait.
  //
  // The emulator performs each copy as late as that allows, at the wait that
  // guarantees it, and fills the destination with 0xFF bytes (a NaN pattern) at
  // issue: a thread that reads the destination before its wait, or another
  // thread that reads it before a barrier after that wait, sees NaN, and a
  // store into a destination still in flight is overwritten when the copy
  // lands. The source is read at the wait.

  bool in_smem(const void *p, size_t bytes) const {
    const unsigned char *a = (const unsigned char *)p;
    return a >= smem && (size_t)(a - smem) <= L->smem && L->smem - (size_t)(a - smem) >= bytes;
  }

  void cp_async(void *dst, const void *src, int src_bytes, const char *what) {
    Fiber *f = cur;
    if (src_bytes < 0 || src_bytes > 16) fail_fiber("%s: src_bytes %d outside 0..16", what, src_bytes);
    if ((uintptr_t)dst % 16 != 0) fail_fiber("%s: shared destination %p is not 16-byte aligned", what, dst);
    if (!in_smem(dst, 16))
      fail_fiber("%s: destination %p..+16 is outside the block's %zu bytes of dynamic shared memory", what, dst,
                 L->smem);
    if ((uintptr_t)src % 16 != 0) fail_fiber("%s: global source %p is not 16-byte aligned", what, src);
    if (f->copies.size() >= kMaxAsyncCopies)
      fail_fiber("%s: %zu cp.async in flight without a wait", what, f->copies.size());
    memset(dst, 0xFF, 16);
    f->copies.push_back(AsyncCopy{(unsigned char *)dst, (const unsigned char *)src, src_bytes, 0});
  }

  void cp_async_commit() {
    Fiber *f = cur;
    f->groups++;
    for (AsyncCopy &c : f->copies)
      if (c.group == 0) c.group = f->groups;
  }

  // Completes every committed copy of a group older than the n most recent.
  void cp_async_wait(int n) {
    Fiber *f = cur;
    if (n < 0) fail_fiber("attnc_cp_async_wait<%d>: negative group count", n);
    int last = f->groups - n;  // groups 1..last complete
    size_t keep = 0;
    for (size_t i = 0; i < f->copies.size(); i++) {
      AsyncCopy c = f->copies[i];
      if (c.group != 0 && c.group <= last) {
        if (c.src_bytes > 0) memcpy(c.dst, c.src, (size_t)c.src_bytes);
        memset(c.dst + c.src_bytes, 0, (size_t)(16 - c.src_bytes));
      } else {
        f->copies[keep++] = c;
      }
    }
    f->copies.resize(keep);
  }

  void cp_async_wait_all() {
    cp_async_commit();
    cp_async_wait(0);
  }

  // ---- ldmatrix, lane by lane ---------------------------------------------
  //
  // PTX ISA 8.x, 9.7.14.5.15 "Warp-level matrix load instruction: ldmatrix",
  // ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16: num (1, 2, 4)
  // 8x8 matrices of 16-bit elements, each row 16 contiguous bytes at a
  // 16-byte-aligned shared address. Lanes 8i..8i+7 give the addresses of rows
  // 0..7 of matrix i (for x1 and x2 the other lanes' addresses are not used).
  // Each lane receives one 32-bit register per matrix: lane l holds row l/4,
  // elements 2(l%4) and 2(l%4)+1, the lower-indexed one in the low 16 bits
  // (four consecutive lanes hold a row). With .trans the matrix is read in
  // column-major order: lane l receives elements (2(l%4), l/4) and
  // (2(l%4)+1, l/4) of the stored matrix (row, column). Every lane of the
  // warp must execute the same ldmatrix.
  void ldmatrix(int32_t *r, int num, bool trans, const void *row) {
    int log2n = num == 1 ? 0 : num == 2 ? 1 : 2;
    int tag = kOpLdmatrix + 2 * (3 * (int)trans + log2n);
    Warp &W = warp_enter(op_name(tag));
    int lane = cur->tid % kLanes;
    if (lane < 8 * num) {
      if ((uintptr_t)row % 16 != 0)
        fail_fiber("%s: lane %d's row address %p is not 16-byte aligned", op_name(tag), lane, row);
      if (!in_smem(row, 16))
        fail_fiber("%s: lane %d's row %p..+16 is outside the block's %zu bytes of dynamic shared memory",
                   op_name(tag), lane, row, L->smem);
    }
    W.row[lane] = (const unsigned char *)row;
    warp_barrier(W, tag);
    auto elem = [&](int m, int i, int j) {  // matrix m, row i, column j
      uint16_t h;
      memcpy(&h, W.row[8 * m + i] + 2 * j, 2);
      return (uint32_t)h;
    };
    int out[4];
    int g = lane >> 2, t = lane & 3;
    for (int m = 0; m < num; m++) {
      uint32_t lo = trans ? elem(m, 2 * t, g) : elem(m, g, 2 * t);
      uint32_t hi = trans ? elem(m, 2 * t + 1, g) : elem(m, g, 2 * t + 1);
      out[m] = (int32_t)(lo | hi << 16);
    }
    warp_barrier(W, tag + 1);
    for (int m = 0; m < num; m++) r[m] = out[m];
  }
};

void fiber_main() {
  Sched *s = tl_sched;
  s->L->body(s->L->arg);
  s->finish();
}

// Schedulers (fiber stacks, shared memory) are reused across launches and
// freed when the library is unloaded.
// At most kPoolFibers pooled fiber stacks per library: each guarded stack is
// two mappings, and vm.max_map_count is about 65000 per process.
const int kPoolFibers = 4096;

struct Pool {
  std::mutex mu;
  std::vector<Sched *> free;
  int fibers = 0;
  ~Pool() {
    for (Sched *s : free) delete s;
  }
} g_pool;

Sched *take_sched() {
  {
    std::lock_guard<std::mutex> lk(g_pool.mu);
    if (!g_pool.free.empty()) {
      Sched *s = g_pool.free.back();
      g_pool.free.pop_back();
      g_pool.fibers -= s->cap;
      return s;
    }
  }
  return new (std::nothrow) Sched();
}

void give_sched(Sched *s) {
  {
    std::lock_guard<std::mutex> lk(g_pool.mu);
    if (g_pool.fibers + s->cap <= kPoolFibers) {
      g_pool.fibers += s->cap;
      g_pool.free.push_back(s);
      return;
    }
  }
  delete s;
}

// Dynamic shared memory limits set by attnc_set_smem, per kernel.
std::mutex g_smem_mu;
std::unordered_map<const void *, int> g_smem_limit;

int smem_limit(const void *kernel) {
  std::lock_guard<std::mutex> lk(g_smem_mu);
  auto it = g_smem_limit.find(kernel);
  return it == g_smem_limit.end() ? kDefaultSmem : it->second;
}

void worker(Launch *L, Sched *s) {
  tl_sched = s;
  s->L = L;
  if (!s->prepare(L->block, L->smem)) {
    report(kErrMemoryAllocation, "attnc emu: kernel %s: cannot map fiber stacks or shared memory", L->name);
    L->failed.store(true);
  }
  while (!L->failed.load()) {
    int b = L->next.fetch_add(1);
    if (b >= L->grid) break;
    s->run_block(b);
  }
  s->L = nullptr;
  tl_sched = nullptr;
}

void run_launch(Launch &L, const void *key) {
  if (L.grid <= 0 || L.block <= 0 || L.block > kMaxThreads) {
    report(kErrInvalidConfiguration, "attnc emu: kernel %s: invalid launch configuration grid=%d block=%d", L.name,
           L.grid, L.block);
    return;
  }
  int lim = smem_limit(key);
  if (L.smem > (size_t)lim) {
    report(kErrInvalidValue,
           "attnc emu: kernel %s: %zu bytes of dynamic shared memory exceed the limit of %d "
           "(raise it with attnc_set_smem, at most %d)",
           L.name, L.smem, lim, kMaxSmem);
    return;
  }
  unsigned hw = std::thread::hardware_concurrency();
  int nw = env_int("ATTNC_EMU_THREADS", hw ? (int)hw : 4, 1, 4096);
  if (nw > L.grid) nw = L.grid;
  std::vector<Sched *> scheds;
  std::vector<std::thread> threads;
  for (int i = 0; i < nw; i++) {
    Sched *s = take_sched();
    if (!s) break;
    try {
      threads.emplace_back(worker, &L, s);
    } catch (...) {
      give_sched(s);
      break;
    }
    scheds.push_back(s);
  }
  if (threads.empty()) {  // no thread could start: run here
    Sched *s = take_sched();
    if (!s) {
      report(kErrMemoryAllocation, "attnc emu: kernel %s: out of memory", L.name);
      return;
    }
    Sched *saved = tl_sched;
    worker(&L, s);
    tl_sched = saved;
    give_sched(s);
    return;
  }
  for (std::thread &t : threads) t.join();
  for (Sched *s : scheds) give_sched(s);
}

template <class... P>
struct Thunk {
  void (*kernel)(P...);
  std::tuple<P...> args;
  static void run(void *p) {
    Thunk *t = static_cast<Thunk *>(p);
    std::apply(t->kernel, t->args);
  }
};

template <class... P, class... A>
void launch(const char *name, void (*kernel)(P...), long long grid, long long block, size_t smem, void *stream,
            A &&...args) {
  (void)stream;
  Thunk<P...> th{kernel, std::tuple<P...>(std::forward<A>(args)...)};
  Launch L;
  L.name = name;
  L.body = &Thunk<P...>::run;
  L.arg = &th;
  L.grid = grid > 0x7fffffff ? -1 : (int)grid;
  L.block = block > 0x7fffffff ? -1 : (int)block;
  L.smem = smem;
  run_launch(L, reinterpret_cast<const void *>(kernel));
}

inline Sched *sched() { return tl_sched; }

}  // namespace
}  // namespace attnc_emu

// ---- the prelude names ---------------------------------------------------------

#ifndef __device__
#define __device__
#endif
#ifndef __host__
#define __host__
#endif
#ifndef __forceinline__
#define __forceinline__ inline
#endif
// __shared__ and __global__ are deliberately not defined: kernels use
// ATTNC_KERNEL and ATTNC_DYN_SMEM.
#define __launch_bounds__(...)

#define ATTNC_KERNEL extern "C"
#define ATTNC_DEV static inline

static inline int attnc_tid(void) { return attnc_emu::sched()->cur->tid; }
static inline int attnc_bid(void) { return attnc_emu::sched()->bid; }
static inline int attnc_nblocks(void) { return attnc_emu::sched()->L->grid; }
static inline int attnc_nthreads(void) { return attnc_emu::sched()->n; }
static inline void attnc_sync(void) { attnc_emu::sched()->block_sync(); }

#define ATTNC_DYN_SMEM(name) unsigned char *name = attnc_emu::sched()->smem

static inline float attnc_i32_as_f32(int32_t v) {
  float f;
  memcpy(&f, &v, 4);
  return f;
}
static inline int32_t attnc_f32_as_i32(float f) {
  int32_t v;
  memcpy(&v, &f, 4);
  return v;
}

static inline float attnc_shfl_xor_f32(float v, int mask) {
  return attnc_i32_as_f32(
      (int32_t)attnc_emu::sched()->shfl((uint32_t)attnc_f32_as_i32(v), mask, attnc_emu::kOpShflXor));
}
static inline int32_t attnc_shfl_xor_i32(int32_t v, int mask) {
  return (int32_t)attnc_emu::sched()->shfl((uint32_t)v, mask, attnc_emu::kOpShflXor);
}
static inline float attnc_shfl_idx_f32(float v, int src) {
  return attnc_i32_as_f32(
      (int32_t)attnc_emu::sched()->shfl((uint32_t)attnc_f32_as_i32(v), src, attnc_emu::kOpShflIdx));
}
static inline int32_t attnc_shfl_idx_i32(int32_t v, int src) {
  return (int32_t)attnc_emu::sched()->shfl((uint32_t)v, src, attnc_emu::kOpShflIdx);
}

#if ATTNC_EMU_LANES == 32
// NVIDIA-only names: tensor-core mma, cp.async and ldmatrix.
static inline void attnc_mma_f16(float d[4], const int32_t a[4], const int32_t b[2]) {
  attnc_emu::sched()->mma(d, a, b, false);
}
static inline void attnc_mma_bf16(float d[4], const int32_t a[4], const int32_t b[2]) {
  attnc_emu::sched()->mma(d, a, b, true);
}

static inline void attnc_cp_async16(void *smem_dst, const void *gmem_src) {
  attnc_emu::sched()->cp_async(smem_dst, gmem_src, 16, "attnc_cp_async16");
}
static inline void attnc_cp_async16_zfill(void *smem_dst, const void *gmem_src, int src_bytes) {
  attnc_emu::sched()->cp_async(smem_dst, gmem_src, src_bytes, "attnc_cp_async16_zfill");
}
static inline void attnc_cp_async_commit(void) { attnc_emu::sched()->cp_async_commit(); }
template <int N>
static inline void attnc_cp_async_wait(void) {
  static_assert(N >= 0, "attnc_cp_async_wait<N>: N >= 0");
  attnc_emu::sched()->cp_async_wait(N);
}
static inline void attnc_cp_async_wait_all(void) { attnc_emu::sched()->cp_async_wait_all(); }

static inline void attnc_ldmatrix_x1(int32_t r[1], const void *row) { attnc_emu::sched()->ldmatrix(r, 1, false, row); }
static inline void attnc_ldmatrix_x2(int32_t r[2], const void *row) { attnc_emu::sched()->ldmatrix(r, 2, false, row); }
static inline void attnc_ldmatrix_x4(int32_t r[4], const void *row) { attnc_emu::sched()->ldmatrix(r, 4, false, row); }
static inline void attnc_ldmatrix_x1_trans(int32_t r[1], const void *row) {
  attnc_emu::sched()->ldmatrix(r, 1, true, row);
}
static inline void attnc_ldmatrix_x2_trans(int32_t r[2], const void *row) {
  attnc_emu::sched()->ldmatrix(r, 2, true, row);
}
static inline void attnc_ldmatrix_x4_trans(int32_t r[4], const void *row) {
  attnc_emu::sched()->ldmatrix(r, 4, true, row);
}
#else
// AMD-only names: MFMA 16x16x16 on a 64-lane wavefront.
static inline void attnc_mfma_f16(float d[4], const int32_t a[2], const int32_t b[2]) {
  attnc_emu::sched()->mfma(d, a, b, false);
}
static inline void attnc_mfma_bf16(float d[4], const int32_t a[2], const int32_t b[2]) {
  attnc_emu::sched()->mfma(d, a, b, true);
}
#endif

static inline float attnc_exp(float x) { return expf(x); }
static inline float attnc_log(float x) { return logf(x); }
static inline float attnc_exp2(float x) { return exp2f(x); }
static inline float attnc_tanh(float x) { return tanhf(x); }
static inline float attnc_sqrt(float x) { return sqrtf(x); }
static inline float attnc_floor(float x) { return floorf(x); }
static inline float attnc_sin(float x) { return sinf(x); }
static inline float attnc_cos(float x) { return cosf(x); }
static inline float attnc_fabs(float x) { return fabsf(x); }
static inline float attnc_fmax(float a, float b) { return fmaxf(a, b); }
static inline float attnc_fmin(float a, float b) { return fminf(a, b); }
static inline float attnc_fma(float a, float b, float c) { return fmaf(a, b, c); }

static inline float attnc_f16_to_f32(uint16_t h) { return attnc_emu::f16_to_f32(h); }
static inline uint16_t attnc_f32_to_f16(float f) { return attnc_emu::f32_to_f16(f); }
static inline float attnc_bf16_to_f32(uint16_t h) { return attnc_emu::bf16_to_f32(h); }
static inline uint16_t attnc_f32_to_bf16(float f) { return attnc_emu::f32_to_bf16(f); }
static inline int32_t attnc_pack_f16x2(float lo, float hi) {
  return (int32_t)((uint32_t)attnc_emu::f32_to_f16(lo) | ((uint32_t)attnc_emu::f32_to_f16(hi) << 16));
}
static inline int32_t attnc_pack_bf16x2(float lo, float hi) {
  return (int32_t)((uint32_t)attnc_emu::f32_to_bf16(lo) | ((uint32_t)attnc_emu::f32_to_bf16(hi) << 16));
}

// ---- host side -----------------------------------------------------------------

typedef void *cudaStream_t;
typedef void *attnc_stream_t;

// Runs the whole grid before it returns; a failure is reported through
// attnc_last_error().
#define ATTNC_LAUNCH(kernel, grid, block, smem, stream, ...) \
  attnc_emu::launch(#kernel, kernel, (grid), (block), (size_t)(smem), (void *)(stream), ##__VA_ARGS__)

static inline int attnc_set_smem(const void *kernel, int bytes) {
  if (bytes < 0 || bytes > attnc_emu::kMaxSmem) {
    attnc_emu::report(attnc_emu::kErrInvalidValue, "attnc emu: attnc_set_smem: %d bytes (at most %d)", bytes,
                      attnc_emu::kMaxSmem);
    return attnc_emu::kErrInvalidValue;
  }
  std::lock_guard<std::mutex> lk(attnc_emu::g_smem_mu);
  attnc_emu::g_smem_limit[kernel] = bytes;
  return 0;
}

// New memory is filled with 0xFF, like shared memory, so that reading scratch
// nobody wrote shows up as NaN.
static inline int attnc_alloc(void **p, size_t bytes, void *s) {
  (void)s;
  *p = nullptr;
  if (bytes == 0) return 0;
  void *m = aligned_alloc(256, attnc_emu::round_up(bytes, 256));
  if (!m) {
    attnc_emu::set_error(attnc_emu::kErrMemoryAllocation);
    return attnc_emu::kErrMemoryAllocation;
  }
  memset(m, 0xFF, bytes);
  *p = m;
  return 0;
}

static inline int attnc_free(void *p, void *s) {
  (void)s;
  free(p);
  return 0;
}

// 4, or $ATTNC_EMU_NUM_SMS.
static inline int attnc_num_sms(void) { return attnc_emu::env_int("ATTNC_EMU_NUM_SMS", 4, 1, 1 << 16); }

// Like cudaGetLastError: returns the first error since the last call and
// clears it.
static inline int attnc_last_error(void) { return attnc_emu::g_last_error.exchange(0); }

// Emulator only: the text of the last failure ("" if none).
static inline const char *attnc_emu_last_message(void) {
  std::lock_guard<std::mutex> lk(attnc_emu::g_msg_mu);
  static thread_local char copy[sizeof attnc_emu::g_msg];
  memcpy(copy, attnc_emu::g_msg, sizeof copy);
  return copy;
}

#endif  // ATTNC_CUDA_EMU_H_
