package hip

import (
	"testing"

	"github.com/attnc/attnc/frontend"
	_ "github.com/attnc/attnc/internal/testgc"
	"github.com/attnc/attnc/ir"
	"github.com/attnc/attnc/passes"
)

func TestTableOrder(t *testing.T) {
	if err := passes.CheckOrder(Table, Constraints); err != nil {
		t.Fatal(err)
	}
}

func parse(t *testing.T, src string) *ir.Variant {
	t.Helper()
	vs, err := frontend.Parse("t.attn", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return vs[0]
}

// FitTiling keeps the largest tiles where they fit half the LDS, and
// shrinks the KV tile for MLA's 576-wide latent rows (which at 32-position
// tiles need more than a CU's LDS), keeping 16-row items.
func TestFitTiling(t *testing.T) {
	small := parse(t, `variant small { heads qo = 8, kv = 2
	  head_dim 64
	  dtype f16
	  cache paged(page_size = 16) }`)
	if got := FitTiling(small); got != Tilings[0] {
		t.Errorf("head_dim 64: %+v, want %+v", got, Tilings[0])
	}
	mla := parse(t, `variant mla { mla(heads = 128, kv_lora_rank = 512, rope_dim = 64)
	  dtype bf16
	  scale 0.07
	  cache paged(page_size = 64) }`)
	got := FitTiling(mla)
	if got == Tilings[0] {
		t.Errorf("MLA 512+64: the largest tiling, which needs %v bytes", must(sharedBytes(mla, Tilings[0])))
	}
	// 16 rows (MFMA's M) come before a second workgroup per CU: the
	// largest 16-row tiling that fits a CU's 64 KiB.
	lds, ok := sharedBytes(mla, got)
	if !ok || got.Rows != 16 || lds > 64<<10 {
		t.Errorf("MLA 512+64: %+v takes %d bytes of LDS, want 16 rows within 64 KiB", got, lds)
	}
}

func must(n int, ok bool) int {
	if !ok {
		return -1
	}
	return n
}
