/* attnc AMX emulator for tests: runs Intel AMX-TILE and AMX-BF16
 * instructions on a CPU that lacks them (they raise #UD, so SIGILL).
 *
 * amxemu_install() installs a SIGILL handler. The handler decodes the
 * faulting instruction at RIP (VEX3 prefix, map 0F38, opcode, ModRM, SIB,
 * displacement; general registers from the ucontext), performs it on this
 * thread's emulated tile state (__thread: kernels run on a thread pool, and
 * AMX tile state is per thread like any register) and advances RIP past it.
 * Anything else that raises SIGILL (another instruction, an AMX form not
 * listed here, a reserved field set, an invalid tile configuration, a shape
 * the instruction would #UD on) is reported on stderr with its bytes and
 * aborts the process: nothing is skipped.
 *
 * Instructions (Intel SDM vol. 2, "Intel AMX instructions"; palette 1: 8
 * tiles of at most 16 rows of at most 64 bytes):
 *   LDTILECFG m512     VEX.128.NP.0F38.W0 49 !(11):000:bbb
 *   STTILECFG m512     VEX.128.66.0F38.W0 49 !(11):000:bbb
 *   TILERELEASE        VEX.128.NP.0F38.W0 49 C0
 *   TILEZERO tmm       VEX.128.F2.0F38.W0 49 11:rrr:000
 *   TILELOADD tmm,sib  VEX.128.F2.0F38.W0 4B !(11):rrr:100
 *   TILELOADDT1        VEX.128.66.0F38.W0 4B !(11):rrr:100
 *   TILESTORED sib,tmm VEX.128.F3.0F38.W0 4B !(11):rrr:100
 *   TDPBF16PS t1,t2,t3 VEX.128.F3.0F38.W0 5C 11:rrr:bbb (t1 reg, t2 r/m, t3 vvvv)
 * TDPBF16PS follows the SDM's operation exactly: per destination row, even
 * and odd bf16 products accumulate into two f32 temporaries from +0 (an f32
 * FMA each, RNE), then the row element += (even + odd); every step reads
 * denormal inputs as zero and flushes denormal results to zero; MXCSR is
 * neither read nor written. NaN payloads are whatever this CPU's fmaf
 * gives: tests compare NaN as NaN, not bit for bit.
 *
 * amxemu_count() is how many AMX instructions were emulated (all threads),
 * amxemu_count_dp() how many of them were TDPBF16PS: a test proves with it
 * that the AMX code ran.
 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

typedef struct {
  int palette; /* 0: tiles not configured */
  int start_row;
  int colsb[8];
  int rows[8];
  uint8_t t[8][16][64];
} amx_tiles;

static __thread amx_tiles tiles;
static long n_insts, n_dp;

long amxemu_count(void) { return __atomic_load_n(&n_insts, __ATOMIC_RELAXED); }
long amxemu_count_dp(void) { return __atomic_load_n(&n_dp, __ATOMIC_RELAXED); }

static void die(const uint8_t *rip, const char *why) {
  char buf[256];
  int n = snprintf(buf, sizeof buf,
                   "amxemu: %s at %p: bytes %02x %02x %02x %02x %02x %02x %02x %02x\n", why,
                   (const void *)rip, rip[0], rip[1], rip[2], rip[3], rip[4], rip[5], rip[6], rip[7]);
  if (n > 0) {
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
  }
  signal(SIGABRT, SIG_DFL);
  abort();
}

/* gregs index of x86-64 register number r (0 rax .. 15 r15). */
static const int gpr[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI,
                            REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};

static float daz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }

static float bf16(const uint8_t *p) {
  uint32_t u = (uint32_t)(p[0] | (p[1] << 8)) << 16;
  float f;
  memcpy(&f, &u, 4);
  return daz(f);
}

/* fma and add with DAZ and FTZ, round to nearest even (this thread's
 * MXCSR is the handler's default: RNE, no DAZ/FTZ; flushing is explicit). */
static float fma_dz(float a, float b, float c) { return daz(fmaf(daz(a), daz(b), daz(c))); }
static float add_dz(float a, float b) { return daz(daz(a) + daz(b)); }

static float rdf(const uint8_t *p) {
  float f;
  memcpy(&f, p, 4);
  return f;
}

static void check_tile(const uint8_t *rip, int t) {
  if (tiles.palette == 0) die(rip, "tile instruction with tiles not configured (#UD)");
  if (t > 7) die(rip, "tile register above tmm7 (#UD)");
  if (tiles.rows[t] == 0 || tiles.colsb[t] == 0) die(rip, "tile not configured by LDTILECFG (#UD)");
}

static void ldtilecfg(const uint8_t *rip, const uint8_t *m) {
  if (m[0] == 0) {
    memset(&tiles, 0, sizeof tiles);
    return;
  }
  if (m[0] != 1) die(rip, "LDTILECFG palette other than 0 and 1 (#GP)");
  for (int i = 2; i < 16; i++)
    if (m[i]) die(rip, "LDTILECFG reserved bytes 2..15 not zero (#GP)");
  for (int i = 32; i < 48; i++)
    if (m[i]) die(rip, "LDTILECFG colsb of tiles 8..15 not zero (#GP)");
  for (int i = 56; i < 64; i++)
    if (m[i]) die(rip, "LDTILECFG rows of tiles 8..15 not zero (#GP)");
  amx_tiles nt;
  memset(&nt, 0, sizeof nt);
  nt.palette = 1;
  nt.start_row = m[1];
  for (int i = 0; i < 8; i++) {
    nt.colsb[i] = m[16 + 2 * i] | (m[17 + 2 * i] << 8);
    nt.rows[i] = m[48 + i];
    if (nt.colsb[i] > 64 || nt.rows[i] > 16) die(rip, "LDTILECFG tile above 16 rows x 64 bytes (#GP)");
    if ((nt.colsb[i] == 0) != (nt.rows[i] == 0)) die(rip, "LDTILECFG tile with rows or colsb zero but not both (#GP)");
  }
  tiles = nt;
}

static void sttilecfg(uint8_t *m) {
  memset(m, 0, 64);
  if (tiles.palette == 0) return;
  m[0] = (uint8_t)tiles.palette;
  m[1] = (uint8_t)tiles.start_row;
  for (int i = 0; i < 8; i++) {
    m[16 + 2 * i] = (uint8_t)tiles.colsb[i];
    m[17 + 2 * i] = (uint8_t)(tiles.colsb[i] >> 8);
    m[48 + i] = (uint8_t)tiles.rows[i];
  }
}

/* tile_rows_zero zeroes tile t from row r and the bytes past colsb in rows
 * below r (write_row_and_zero, zero_upper_rows). */
static void tile_tail_zero(int t) {
  for (int r = 0; r < 16; r++) {
    if (r >= tiles.rows[t])
      memset(tiles.t[t][r], 0, 64);
    else
      memset(tiles.t[t][r] + tiles.colsb[t], 0, (size_t)(64 - tiles.colsb[t]));
  }
}

static void tdpbf16ps(const uint8_t *rip, int d, int a, int b) {
  check_tile(rip, d);
  check_tile(rip, a);
  check_tile(rip, b);
  if (d == a || d == b || a == b) die(rip, "TDPBF16PS with a tile register repeated (#UD)");
  int dc = tiles.colsb[d], ac = tiles.colsb[a], bc = tiles.colsb[b];
  if (dc % 4 || ac % 4 || bc % 4) die(rip, "TDPBF16PS colsb not a multiple of 4 (#UD)");
  if (dc != bc) die(rip, "TDPBF16PS dst colsb != src2 colsb (#UD)");
  if (ac / 4 != tiles.rows[b]) die(rip, "TDPBF16PS src1 colsb/4 != src2 rows (#UD)");
  if (tiles.rows[a] != tiles.rows[d]) die(rip, "TDPBF16PS src1 rows != dst rows (#UD)");
  int K = ac / 4, N = dc / 4;
  for (int m = 0; m < tiles.rows[d]; m++) {
    float tmp[32];
    for (int i = 0; i < 2 * N; i++) tmp[i] = 0.0f;
    const uint8_t *ar = tiles.t[a][m];
    for (int k = 0; k < K; k++) {
      const uint8_t *br = tiles.t[b][k];
      float a0 = bf16(ar + 4 * k), a1 = bf16(ar + 4 * k + 2);
      for (int n = 0; n < N; n++) {
        tmp[2 * n] = fma_dz(a0, bf16(br + 4 * n), tmp[2 * n]);
        tmp[2 * n + 1] = fma_dz(a1, bf16(br + 4 * n + 2), tmp[2 * n + 1]);
      }
    }
    uint8_t *dr = tiles.t[d][m];
    for (int n = 0; n < N; n++) {
      float s = add_dz(tmp[2 * n], tmp[2 * n + 1]);
      float r = add_dz(rdf(dr + 4 * n), s);
      memcpy(dr + 4 * n, &r, 4);
    }
  }
  tile_tail_zero(d);
  tiles.start_row = 0;
  __atomic_add_fetch(&n_dp, 1, __ATOMIC_RELAXED);
}

static void on_sigill(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  (void)si;
  ucontext_t *uc = ctx;
  greg_t *g = uc->uc_mcontext.gregs;
  const uint8_t *rip = (const uint8_t *)g[REG_RIP];
  const uint8_t *p = rip;
  if (p[0] != 0xc4) die(rip, "SIGILL on an instruction that is not VEX3-encoded AMX");
  int R = !(p[1] & 0x80), X = !(p[1] & 0x40), B = !(p[1] & 0x20), map = p[1] & 0x1f;
  int W = p[2] >> 7, vvvv = (~p[2] >> 3) & 15, L = (p[2] >> 2) & 1, pp = p[2] & 3;
  if (map != 2 || W || L) die(rip, "SIGILL on a VEX instruction outside AMX's map 0F38 W0 L0");
  int op = p[3], modrm = p[4];
  int mod = modrm >> 6, reg = ((modrm >> 3) & 7) | (R << 3), rmlo = modrm & 7, rm = rmlo | (B << 3);
  p += 5;
  /* Memory operand: base + index<<scale + disp (AMX's tile loads and
   * stores take the index register as the row stride). */
  uint64_t base = 0, stride = 0;
  int64_t disp = 0;
  int ripRel = 0, sib = 0;
  if (mod != 3) {
    if (rmlo == 4) {
      sib = 1;
      int s = *p++;
      int scale = s >> 6, index = ((s >> 3) & 7) | (X << 3), bs = (s & 7) | (B << 3);
      if (index != 4) stride = (uint64_t)g[gpr[index]] << scale;
      if ((s & 7) == 5 && mod == 0) {
        int32_t d32;
        memcpy(&d32, p, 4);
        p += 4;
        disp = d32;
      } else {
        base = (uint64_t)g[gpr[bs]];
      }
    } else if (rmlo == 5 && mod == 0) {
      int32_t d32;
      memcpy(&d32, p, 4);
      p += 4;
      disp = d32;
      ripRel = 1;
    } else {
      base = (uint64_t)g[gpr[rm]];
    }
    if (mod == 1) {
      disp = (int8_t)*p++;
    } else if (mod == 2) {
      int32_t d32;
      memcpy(&d32, p, 4);
      p += 4;
      disp = d32;
    }
  }
  uint64_t next = (uint64_t)g[REG_RIP] + (uint64_t)(p - rip);
  uint64_t addr = (ripRel ? next : base) + (uint64_t)disp;
  int vNone = vvvv == 0; /* vvvv = 1111b: no register */
  if (op == 0x49 && mod != 3 && ((modrm >> 3) & 7) == 0 && !R && vNone && pp == 0) {
    ldtilecfg(rip, (const uint8_t *)addr);
  } else if (op == 0x49 && mod != 3 && ((modrm >> 3) & 7) == 0 && !R && vNone && pp == 1) {
    sttilecfg((uint8_t *)addr);
  } else if (op == 0x49 && modrm == 0xc0 && !R && !B && vNone && pp == 0) {
    memset(&tiles, 0, sizeof tiles);
  } else if (op == 0x49 && mod == 3 && rmlo == 0 && !B && vNone && pp == 3) {
    check_tile(rip, reg);
    memset(tiles.t[reg], 0, sizeof tiles.t[reg]);
  } else if (op == 0x4b && mod != 3 && sib && vNone && (pp == 3 || pp == 1 || pp == 2)) {
    check_tile(rip, reg);
    int t = reg, cb = tiles.colsb[t];
    if (pp == 2) { /* TILESTORED */
      for (int r = tiles.start_row; r < tiles.rows[t]; r++) memcpy((uint8_t *)(addr + (uint64_t)r * stride), tiles.t[t][r], (size_t)cb);
    } else { /* TILELOADD, TILELOADDT1 */
      /* Rows below start_row were loaded before a restart: kept. */
      for (int r = tiles.start_row; r < tiles.rows[t]; r++) memcpy(tiles.t[t][r], (const uint8_t *)(addr + (uint64_t)r * stride), (size_t)cb);
      tile_tail_zero(t);
    }
    tiles.start_row = 0;
  } else if (op == 0x5c && mod == 3 && pp == 2) {
    tdpbf16ps(rip, reg, rm, vvvv);
  } else {
    die(rip, "SIGILL on an instruction the AMX emulator does not implement");
  }
  __atomic_add_fetch(&n_insts, 1, __ATOMIC_RELAXED);
  g[REG_RIP] = (greg_t)next;
}

/* amxemu_install installs the SIGILL handler (idempotent). */
void amxemu_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigill;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGILL, &sa, NULL) != 0) {
    perror("amxemu: sigaction");
    abort();
  }
}

/* Built into a kernel library (or a runner) with -DAMXEMU_CONSTRUCTOR, the
 * handler is installed when the library loads (in a shared library compile
 * with -fPIC: the tile state is then global-dynamic TLS, whose first use
 * on a thread may allocate; kernels do not allocate while they hold tiles).
 * It works in a Go test process that dlopens the library (cpurt.Open):
 * the handler replaces the Go runtime's SIGILL handler, which Go code
 * never needs. */
#ifdef AMXEMU_CONSTRUCTOR
__attribute__((constructor)) static void amxemu_ctor(void) { amxemu_install(); }
#endif
